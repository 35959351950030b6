/*
 * modules/state.h — a module's persistent state seen from outside the
 * module: its weights, norm and slots, with the names checkpoints use (TE's
 * state-dict names). Filled by each module; read by modules/checkpoint.c.
 */
#ifndef F8_MODULES_STATE_H
#define F8_MODULES_STATE_H

#include "modules/norm.h"
#include "modules/weight.h"

typedef struct f8i_module_state {
    f8_ctx *ctx;
    int fp8;
    int n_weights;
    f8i_weight *weights[2];
    const char *weight_names[2]; /* "weight", or "fc1_weight" / "fc2_weight" */
    const char *bias_names[2];
    f8i_norm *norm;              /* NULL for Linear */
    int n_fwd, n_bwd;
    const f8_slot *fwd, *bwd;
} f8i_module_state;

void f8i_linear_state(f8_linear *linear, f8i_module_state *state);
void f8i_layernorm_linear_state(f8_layernorm_linear *module, f8i_module_state *state);
void f8i_layernorm_mlp_state(f8_layernorm_mlp *module, f8i_module_state *state);

#endif /* F8_MODULES_STATE_H */
