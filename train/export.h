/*
 * export.h — `f8_train export CHECKPOINT OUT.onnx`: the GPT of a checkpoint
 * as an ONNX model (f8.h, "ONNX export"): input `tokens` int64 [batch, seq]
 * (both dynamic, seq up to the trained one), output `logits` float32
 * [batch, seq, vocab].
 */
#ifndef F8_TRAIN_EXPORT_H
#define F8_TRAIN_EXPORT_H

#include "gpt.h"

/* Build the graph of m and write it to path. fp8: FP8 GEMMs (the model must
 * have them) or every GEMM in high precision. exact_cast and fp8_embedding
 * (the tied embedding / LM head as per-row FP8: not f8's logits) as
 * f8_onnx_config. */
f8_status gpt_export_onnx(gpt *m, int fp8, int exact_cast, int fp8_embedding, const char *path, char *err,
                          size_t err_size);

typedef struct export_options {
    const char *checkpoint, *out;
    int fp8;             /* -1: as the checkpoint was trained; 0 off; 1 on */
    int exact_cast;
    const char *backend; /* "auto", "cpu", "cuda" */
    int quiet;
    int fp8_embedding;   /* the tied embedding / LM head as per-row FP8 */
} export_options;

/* Load the checkpoint's model on a fresh ctx and export it. Returns 0, or 1
 * with the reason in err. */
int export_run(const export_options *o, char *err, size_t err_size);

/* `f8_train export ...`: parses argv (argv[1] is "export"), prints, returns
 * the exit code. */
int export_main(int argc, char **argv);

#endif /* F8_TRAIN_EXPORT_H */
