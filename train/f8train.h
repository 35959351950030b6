/*
 * f8train.h — the one header of libf8train.a: f8_train's pieces as a library
 * (everything under train/ except main.c), for the trainer program, its tests
 * and its fuzz targets.
 *
 *   gpt.h         the GPT model built from f8 modules, its forward/backward
 *   params.h      a model's parameter table (checkpoint names, flags, views)
 *   model.h       the GPT's state (gpt); options.h f8_train's options
 *   trainer.h     the training run (trainer_create, trainer_step, trainer_run)
 *   dp.h, tp.h    data parallelism (ZeRO-1) and tensor/sequence parallelism
 *   fp8w.h        FP32 masters of FP8 primary weights on one rank
 *   data.h        datasets and the batch sampler; corpus.h the embedded corpus
 *   hf.h          Hugging Face GPT-2 checkpoints in and out
 *   export.h      the model as ONNX
 *   memplan.h     the run's memory plan by category, and the refusal of a run that will not fit
 *   log.h, plot.h the step log and its SVG plot; fp8_report.h FP8 telemetry
 *   parse.h       the one strict number parser; tokenizer.h GPT-2 decoding
 *   try.h         TRY and train_fail, the trainer's error handling
 *
 * It is not installed: the trainer's API may change with the program. A
 * program that only uses f8 includes f8.h.
 */
#ifndef F8_TRAIN_F8TRAIN_H
#define F8_TRAIN_F8TRAIN_H

#include "f8.h"

#include "corpus.h"
#include "data.h"
#include "dp.h"
#include "export.h"
#include "fp8_report.h"
#include "fp8w.h"
#include "gpt.h"
#include "hf.h"
#include "hf_cmd.h"
#include "hf_llama.h"
#include "llama.h"
#include "log.h"
#include "memplan.h"
#include "model.h"
#include "options.h"
#include "params.h"
#include "parse.h"
#include "plot.h"
#include "tokenizer.h"
#include "tp.h"
#include "trainer.h"
#include "try.h"

#endif
