/* cpu/act.c — placeholder until the activation reference lands: reports unsupported. */
#include "f8i.h"
f8_status f8i_cpu_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a) { (void)a; return f8i_error(ctx, F8_ERR_UNSUPPORTED, "activation: not built yet"); }
f8_status f8i_cpu_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *a) { (void)a; return f8i_error(ctx, F8_ERR_UNSUPPORTED, "activation: not built yet"); }
