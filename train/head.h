/*
 * head.h — the LM head and cross-entropy, the part of a forward after the
 * blocks, shared by the model families (gpt.c, llama.c).
 */
#ifndef F8_TRAIN_HEAD_H
#define F8_TRAIN_HEAD_H

#include "model.h"

/* The LM head (m->head: final norm + linear) and cross-entropy over xf (all
 * T_call rows), m->head_rows at a time, losses into m->losses. More than one
 * pass: each pass's head backward runs at once into m->dres's rows and
 * m->head_done says so. */
f8_status head_forward(gpt *m, const f8_tensor *xf, int train, float grad_scale, f8_microbatch mb);

#endif /* F8_TRAIN_HEAD_H */
