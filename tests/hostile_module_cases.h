/*
 * hostile_module_cases.h — hostile calls of the objects built on a ctx:
 * modules (creation and calls), graphs, checkpoints and the training blocks
 * (embedding, attention, cross-entropy, AdamW) (MODULE_CASES; the harness is
 * in hostile_cases.h).
 */
#ifndef F8_TESTS_HOSTILE_MODULE_CASES_H
#define F8_TESTS_HOSTILE_MODULE_CASES_H

#include "hostile_fixture.h"

/* module creation */
static f8_status c_lin_create_nullcfg(fx *f) { f8_module *m = NULL; return f8_linear_create(f->ctx, NULL, &m); }
static f8_status c_lin_create_nullout(fx *f) { f8_linear_config c = f8_linear_config_default(4, 4); return f8_linear_create(f->ctx, &c, NULL); }
static f8_status c_lin_create_in0(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(0, 4); return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_big(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, ((int64_t)1 << 24) + 1); return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_tokens(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.max_tokens = -1; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_pdtype(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.param_dtype = F8_DTYPE_E4M3; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_fp8flag(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.fp8 = 7; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_biasflag(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.bias = -3; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lin_create_fp8w(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(4, 4); c.fp8 = 0, c.fp8_weights = 1; return f8_linear_create(f->ctx, &c, &m); }
static f8_status c_lnl_create_norm(fx *f) { f8_module *m = NULL; f8_layernorm_linear_config c = f8_layernorm_linear_config_default(4, 4); c.normalization = (f8_norm)3; return f8_layernorm_linear_create(f->ctx, &c, &m); }
static f8_status c_lnl_create_eps(fx *f) { f8_module *m = NULL; f8_layernorm_linear_config c = f8_layernorm_linear_config_default(4, 4); c.eps = NAN; return f8_layernorm_linear_create(f->ctx, &c, &m); }
static f8_status c_lnl_create_ret(fx *f) { f8_module *m = NULL; f8_layernorm_linear_config c = f8_layernorm_linear_config_default(4, 4); c.return_layernorm_output = 2; return f8_layernorm_linear_create(f->ctx, &c, &m); }
static f8_status c_mlp_create_act(fx *f) { f8_module *m = NULL; f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(4, 4); c.activation = (f8_activation)7; return f8_layernorm_mlp_create(f->ctx, &c, &m); }
static f8_status c_mlp_create_ffn(fx *f) { f8_module *m = NULL; f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(4, ((int64_t)1 << 23) + 1); return f8_layernorm_mlp_create(f->ctx, &c, &m); }
static f8_status c_mlp_create_zc(fx *f) { f8_module *m = NULL; f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(4, 4); c.zero_centered_gamma = 5; return f8_layernorm_mlp_create(f->ctx, &c, &m); }

/* module calls */
static f8_status c_param_which(fx *f) { f8_tensor v; return f8_module_param(f->lin, F8_PARAM_FC1_WEIGHT, 0, &v); }
static f8_status c_param_enum(fx *f) { f8_tensor v; return f8_module_param(f->lin, (f8_param)99, 0, &v); }
static f8_status c_param_grad2(fx *f) { f8_tensor v; return f8_module_param(f->lin, F8_PARAM_WEIGHT, 2, &v); }
static f8_status c_param_null(fx *f) { return f8_module_param(f->lin, F8_PARAM_WEIGHT, 0, NULL); }
static f8_status c_param_nobias(fx *f) { f8_tensor v; return f8_module_param(f->nobias, F8_PARAM_BIAS, 0, &v); }
static f8_status c_slot_dir(fx *f) { f8_slot s; return f8_module_slot(f->lin, (f8_direction)3, 0, &s); }
static f8_status c_slot_index(fx *f) { f8_slot s; return f8_module_slot(f->lin, F8_DIR_BACKWARD, 2, &s); }
static f8_status c_slot_nullout(fx *f) { return f8_module_slot(f->mlp, F8_DIR_FORWARD, 0, NULL); }
static f8_status c_main_grad_unfused(fx *f) { return f8_module_set_main_grad(f->lin, F8_PARAM_WEIGHT, (float *)f->buf[B_P]); }
static f8_status c_main_grad_bias(fx *f) { return f8_module_set_main_grad(f->lin, F8_PARAM_BIAS, (float *)f->buf[B_P]); }
static f8_status c_zero_grad_null(fx *f) { (void)f; return f8_module_zero_grad(NULL); }
static f8_status c_saved_create_null(fx *f) { return f8_module_saved_create(f->lin, NULL); }
static f8_status c_write_weight_shape(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_K, H_N); return f8_module_write_weight(f->lin, F8_PARAM_WEIGHT, &s); }
static f8_status c_write_weight_bias(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, 1, H_N); return f8_module_write_weight(f->lin, F8_PARAM_BIAS, &s); }
static f8_status c_write_weight_huge(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, H_K); return f8_module_write_weight(f->lin, F8_PARAM_WEIGHT, &s); }
static f8_status c_fwd_x_null(fx *f) { f8_tensor y = Y32(f); return f8_module_forward(f->lin, NULL, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_cols(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, 16, 63), y = Y32(f); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_huge(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, H_K), y = Y32(f); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_2p32(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), y = Y32(f); return f8_module_forward(f->mlp, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_tokens(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_FP32, H_T + 1, 4), y = Y32(f); x.cols = H_K; x.rows = H_T + 1; y.rows = H_T + 1; return f8_module_forward(f->lnl, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_x_fp8(fx *f) { f8_tensor x = tview(f, B_X, F8_DTYPE_E4M3, H_T, H_K), y = Y32(f); x.scale_inv = (float *)f->buf[B_LOSS]; return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_y_shape(fx *f) { f8_tensor x = X32(f), y = tview(f, B_Y, F8_DTYPE_FP32, H_T - 1, H_N); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwd_mb(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_module_forward(f->lin, &x, &y, (f8_microbatch)3, NULL); }
static f8_status c_fwd_other_saved(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_module_forward(f->lin, &x, &y, F8_MICROBATCH_NONE, f->s_lnl); }
static f8_status c_fwd_nullmod(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_module_forward(NULL, &x, &y, F8_MICROBATCH_NONE, NULL); }
static f8_status c_bwd_before_fwd(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lin, f->s_fresh, &dy, NULL); }
static f8_status c_bwd_twice(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lin, f->s_used, &dy, NULL); }
static f8_status c_bwd_other_saved(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lin, f->s_lnl, &dy, NULL); }
static f8_status c_bwd_null_saved(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward(f->lnl, NULL, &dy, NULL); }
static f8_status c_bwd_dy_shape(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N + 1); return f8_module_backward(f->lnl, f->s_lnl, &dy, NULL); }
static f8_status c_bwd_dy_huge(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_HUGE + 1, H_N); return f8_module_backward(f->lnl, f->s_lnl, &dy, NULL); }
static f8_status c_bwd_dx_shape(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N), dx = tview(f, B_DX, F8_DTYPE_BF16, H_T, H_K + 1); return f8_module_backward(f->lnl, f->s_lnl, &dy, &dx); }
/* the fused residual calls: bad addends refused before any work */
static f8_status c_fwda_null(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_module_forward_add(f->lin, &x, &y, NULL, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwda_shape(fx *f) { f8_tensor x = X32(f), y = Y32(f), r = tview(f, B_DX, F8_DTYPE_FP32, H_T, H_N + 1); return f8_module_forward_add(f->lin, &x, &y, &r, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwda_dtype(fx *f) { f8_tensor x = X32(f), y = Y32(f), r = tview(f, B_DX, F8_DTYPE_BF16, H_T, H_N); return f8_module_forward_add(f->lin, &x, &y, &r, F8_MICROBATCH_NONE, NULL); }
static f8_status c_fwda_overlap(fx *f) { f8_tensor x = X32(f), y = Y32(f), r = Y32(f); r.data = (char *)r.data + 4; return f8_module_forward_add(f->lnl, &x, &y, &r, F8_MICROBATCH_NONE, NULL); }
static f8_status c_bwda_null_dx(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N); return f8_module_backward_add(f->lnl, f->s_lnl, &dy, NULL); }
static f8_status c_bwda_overlap(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N), dx = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_K); return f8_module_backward_add(f->lnl, f->s_lnl, &dy, &dx); }
static f8_status c_bwda_unfilled(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_N), dx = tview(f, B_DX, F8_DTYPE_FP32, H_T, H_K); return f8_module_backward_add(f->lin, f->s_fresh, &dy, &dx); }
static f8_status c_lnl_fwd_on_linear(fx *f) { f8_tensor x = X32(f), y = Y32(f); return f8_layernorm_linear_forward(f->lin, &x, &y, NULL, F8_MICROBATCH_NONE, NULL); }
static f8_status c_lnl_fwd_lnout(fx *f) { f8_tensor x = X32(f), y = Y32(f), ln = tview(f, B_DX, F8_DTYPE_FP32, H_T, H_K); return f8_layernorm_linear_forward(f->lnl, &x, &y, &ln, F8_MICROBATCH_NONE, NULL); }
static f8_status c_lnl_bwd_on_mlp(fx *f) { f8_tensor dy = tview(f, B_DY, F8_DTYPE_FP32, H_T, H_K); return f8_layernorm_linear_backward(f->mlp, f->s_lnl, &dy, NULL, NULL); }
static f8_status c_update_wscales_null(fx *f) { (void)f; return f8_ctx_update_weight_scales(NULL); }

/* graphs (each leaves the ctx out of capture mode) */
static f8_status c_graph_end_nobegin(fx *f)
{
    f8_graph *g = (f8_graph *)f; /* a stale value end must clear */
    f8_status st = f8_graph_end(f->ctx, &g);
    CHECK(g == NULL, "f8_graph_end without begin left *graph set");
    return st;
}
static f8_status c_graph_begin_twice(fx *f)
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    f8_status st = note(f, f8_graph_begin(f->ctx));
    f8_graph *g = NULL;
    CHECK_OK(f->ctx, f8_graph_end(f->ctx, &g)); /* the first capture is intact: an empty graph */
    f8_graph_destroy(g);
    return st;
}
/* A call refused during a capture; the capture is then spoiled. */
static f8_status during_capture(fx *f, f8_status (*call)(fx *f))
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    f8_status st = note(f, call(f));
    f8_graph *g = (f8_graph *)f;
    f8_status end = f8_graph_end(f->ctx, &g);
    CHECK(end == F8_ERR_STATE && g == NULL, "end after a refused call (%s): %s, graph %p", f->note,
          f8_status_string(end), (void *)g);
    f8_graph_destroy(g);
    return st;
}
static f8_status u_upload(fx *f) { float h[4] = {1, 2, 3, 4}; return f8_ctx_upload(f->ctx, f->buf[B_X], h, sizeof h); }
static f8_status u_download(fx *f) { float h[4]; return f8_ctx_download(f->ctx, h, f->buf[B_X], sizeof h); }
static f8_status u_alloc(fx *f) { void *p = NULL; return f8_ctx_alloc(f->ctx, 64, &p); }
static f8_status u_create(fx *f) { f8_module *m = NULL; f8_linear_config c = f8_linear_config_default(8, 8); return f8_linear_create(f->ctx, &c, &m); }
static f8_status u_fill(fx *f) { f8_tensor t = X32(f); return f8_tensor_fill_normal(f->ctx, &t, 1.0, 3); }
static f8_status u_slot_read(fx *f) { f8_slot sl = {0, 0}; float s; return f8_slot_read(f->ctx, sl, &s, NULL, NULL); }
static f8_status u_ck_add(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status u_att_saved(fx *f) { f8_attention_saved *s = NULL; return f8_attention_saved_create(f->att, &s); }
static f8_status c_cap_upload(fx *f) { return during_capture(f, u_upload); }
static f8_status c_cap_download(fx *f) { return during_capture(f, u_download); }
static f8_status c_cap_alloc(fx *f) { return during_capture(f, u_alloc); }
static f8_status c_cap_create(fx *f) { return during_capture(f, u_create); }
static f8_status c_cap_fill(fx *f) { return during_capture(f, u_fill); }
static f8_status c_cap_slot_read(fx *f) { return during_capture(f, u_slot_read); }
static f8_status c_cap_ck_add(fx *f) { return during_capture(f, u_ck_add); }
static f8_status c_cap_att_saved(fx *f) { return during_capture(f, u_att_saved); }
static f8_status c_cap_end_spoiled(fx *f)
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    CHECK(u_upload(f) == F8_ERR_STATE, "upload while capturing was not refused");
    f8_graph *g = NULL;
    return f8_graph_end(f->ctx, &g);
}
static f8_status c_cap_end_null(fx *f)
{
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    return f8_graph_end(f->ctx, NULL);
}
static f8_status c_cap_replay(fx *f)
{
    f8_graph *g0 = NULL, *g1 = (f8_graph *)f;
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    CHECK_OK(f->ctx, f8_graph_end(f->ctx, &g0));
    CHECK_OK(f->ctx, f8_graph_begin(f->ctx));
    f8_status st = note(f, f8_graph_replay(g0));
    CHECK(f8_graph_end(f->ctx, &g1) == F8_ERR_STATE && g1 == NULL, "replay while capturing did not spoil the capture");
    f8_graph_destroy(g0);
    return st;
}
static f8_status c_replay_null(fx *f) { (void)f; return f8_graph_replay(NULL); }
static f8_status c_begin_null(fx *f) { (void)f; return f8_graph_begin(NULL); }

/* checkpoints */
static f8_status c_ck_create_null(fx *f) { return f8_checkpoint_create(f->ctx, NULL); }
static f8_status c_ck_add_noname(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, NULL, &t); }
static f8_status c_ck_add_meta(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "__metadata__", &t); }
static f8_status c_ck_add_dup(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "t", &t); }
static f8_status c_ck_add_utf8(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "bad\xff", &t); }
static f8_status c_ck_add_huge(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status c_ck_add_dtype(fx *f) { f8_tensor t = tview(f, B_LOSS, (f8_dtype)-1, 1, 4); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status c_ck_add_nodata(fx *f) { f8_tensor t = f8_tensor_make(NULL, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_add_tensor(f->ck, "x", &t); }
static f8_status c_ck_read_missing(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 1, 4); return f8_checkpoint_read_tensor(f->ck, "nope", &t); }
static f8_status c_ck_read_dtype(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_BF16, 1, 4); return f8_checkpoint_read_tensor(f->ck, "t", &t); }
static f8_status c_ck_read_shape(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, 2, 2); return f8_checkpoint_read_tensor(f->ck, "t", &t); }
static f8_status c_ck_read_huge(fx *f) { f8_tensor t = tview(f, B_LOSS, F8_DTYPE_FP32, H_HUGE + 1, 4); return f8_checkpoint_read_tensor(f->ck, "t", &t); }
static f8_status c_ck_meta_format(fx *f) { return f8_checkpoint_set_metadata(f->ck, "format", "pt"); }
static f8_status c_ck_meta_f8(fx *f) { return f8_checkpoint_set_metadata(f->ck, "f8.format_version", "9"); }
static f8_status c_ck_meta_null(fx *f) { return f8_checkpoint_set_metadata(f->ck, "user", NULL); }
static f8_status c_ck_meta_utf8(fx *f) { return f8_checkpoint_set_metadata(f->ck, "user", "\xc3"); }
static f8_status c_ck_load_missing(fx *f) { f8_checkpoint *c = (f8_checkpoint *)f; f8_status st = f8_checkpoint_load(f->ctx, "/nonexistent-f8/x.safetensors", &c); CHECK(c == NULL, "failed load left *checkpoint set"); return st; }
static f8_status c_ck_load_null(fx *f) { f8_checkpoint *c = NULL; return f8_checkpoint_load(f->ctx, NULL, &c); }
static f8_status c_ck_load_garbage(fx *f) { static const char junk[] = "\x05\0\0\0\0\0\0\0{\"a\":"; f8_checkpoint *c = NULL; return f8_checkpoint_load_memory(f->ctx, junk, sizeof junk - 1, &c); }
static f8_status c_ck_load_short(fx *f) { f8_checkpoint *c = NULL; return f8_checkpoint_load_memory(f->ctx, "abc", 3, &c); }
static f8_status c_ck_save_dir(fx *f) { return f8_checkpoint_save(f->ck, "/nonexistent-f8/dir/x.safetensors"); }
static f8_status c_ck_add_module_clash(fx *f) { return f8_checkpoint_add_module(f->ck, "m", f->lin); }
static f8_status c_ck_add_module_ctx(fx *f) { return f8_checkpoint_add_module(f->ck_other, "lin", f->lin); }
static f8_status c_ck_add_module_null(fx *f) { return f8_checkpoint_add_module(f->ck, NULL, f->lin); }
static f8_status c_ck_restore_missing(fx *f) { return f8_checkpoint_restore_module(f->ck, "m", f->lin); }
static f8_status c_ck_add_adamw_null(fx *f) { return f8_checkpoint_add_adamw(f->ck, NULL, f->opt); }
static f8_status c_ck_add_adamw_ctx(fx *f) { return f8_checkpoint_add_adamw(f->ck_other, "opt", f->opt); }
static f8_status c_ck_restore_adamw(fx *f) { return f8_checkpoint_restore_adamw(f->ck, "opt", f->opt); }

/* training blocks */
#define TOKS(f) ((const int32_t *)(f)->buf[B_TOK])
static f8_status c_emb_tokens(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, NULL, H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_seq0(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), 0, &wte, &wpe, &y); }
static f8_status c_emb_wpe(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ + 1, &wte, &wpe, &y); }
static f8_status c_emb_cols(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C - 1); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_overlap(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_WTE, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_fp8(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_E4M3, H_V, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); wte.scale_inv = (float *)f->buf[B_LOSS]; return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_huge(fx *f) { f8_tensor wte = tview(f, B_WTE, F8_DTYPE_FP32, H_HUGE + 1, H_C), wpe = tview(f, B_WPE, F8_DTYPE_FP32, H_SEQ, H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_forward(f->ctx, TOKS(f), H_SEQ, &wte, &wpe, &y); }
static f8_status c_emb_bwd_null(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_embedding_backward(f->ctx, TOKS(f), H_SEQ, &dy, NULL, NULL); }
static f8_status c_emb_bwd_huge(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), dwte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, (int64_t)1 << 32); return f8_embedding_backward(f->ctx, TOKS(f), H_SEQ, &dy, &dwte, NULL); }
static f8_status c_emb_bwd_overlap(fx *f) { f8_tensor dy = tview(f, B_WTE, F8_DTYPE_FP32, H_T, H_C), dwte = tview(f, B_WTE, F8_DTYPE_FP32, H_V, H_C); return f8_embedding_backward(f->ctx, TOKS(f), H_SEQ, &dy, &dwte, NULL); }
static f8_status c_att_create_heads(fx *f) { f8_attention *a = NULL; f8_attention_config c = f8_attention_config_default(0, 16, 1, 8); return f8_attention_create(f->ctx, &c, &a); }
static f8_status c_att_create_dtype(fx *f) { f8_attention *a = NULL; f8_attention_config c = f8_attention_config_default(2, 16, 1, 8); c.dtype = F8_DTYPE_E4M3; return f8_attention_create(f->ctx, &c, &a); }
static f8_status c_att_create_batch(fx *f) { f8_attention *a = NULL; f8_attention_config c = f8_attention_config_default(2, 16, ((int64_t)1 << 24) + 1, 8); return f8_attention_create(f->ctx, &c, &a); }
static f8_status c_att_create_null(fx *f) { f8_attention *a = NULL; return f8_attention_create(f->ctx, NULL, &a); }
static f8_status c_att_saved_null(fx *f) { return f8_attention_saved_create(f->att, NULL); }
static f8_status c_att_fwd_batch(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, 3 * H_SEQ, 3 * H_C), y = tview(f, B_AY, F8_DTYPE_FP32, 3 * H_SEQ, H_C); return f8_attention_forward(f->att, &q, 3, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_cols(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C - 1), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_dtype(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_BF16, H_T, 3 * H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_other(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, f->att2_s); }
static f8_status c_att_fwd_overlap(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C), y = tview(f, B_QKV, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_fwd_huge(fx *f) { f8_tensor q = tview(f, B_QKV, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), y = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C); return f8_attention_forward(f->att, &q, 2, H_SEQ, &y, NULL); }
static f8_status c_att_bwd_unfilled(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C), d = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C); return f8_attention_backward(f->att, f->att_s, &dy, &d); }
static f8_status c_att_bwd_other(fx *f) { f8_tensor dy = tview(f, B_AY, F8_DTYPE_FP32, H_T, H_C), d = tview(f, B_QKV, F8_DTYPE_FP32, H_T, 3 * H_C); return f8_attention_backward(f->att, f->att2_s, &dy, &d); }
static f8_status c_ce_vocab0(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, 0, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_ce_vocab_big(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V + 1, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_ce_targets(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V, NULL, 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_ce_losses(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V, TOKS(f), 1.0f, NULL, NULL); }
static f8_status c_ce_overlap(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_T, H_V), d = tview(f, B_LOGITS, F8_DTYPE_BF16, H_T, H_V); return f8_cross_entropy(f->ctx, &l, H_V, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], &d); }
static f8_status c_ce_huge(fx *f) { f8_tensor l = tview(f, B_LOGITS, F8_DTYPE_FP32, H_HUGE + 1, H_V); return f8_cross_entropy(f->ctx, &l, H_V, TOKS(f), 1.0f, (float *)f->buf[B_LOSS], NULL); }
static f8_status c_opt_create_lr(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.lr_max = -1; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_beta(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.beta2 = 1.0f; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_eps(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.eps = NAN; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_steps(fx *f) { f8_adamw *o = NULL; f8_adamw_config c = f8_adamw_config_default(); c.warmup_steps = 10, c.total_steps = 5; return f8_adamw_create(f->ctx, &c, &o); }
static f8_status c_opt_create_null(fx *f) { f8_adamw_config c = f8_adamw_config_default(); return f8_adamw_create(f->ctx, &c, NULL); }
static f8_status c_opt_add_shape(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_FP32, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 4, 16); return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_add_dtype(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_E4M3, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 8, 8); p.scale_inv = (float *)f->buf[B_LOSS]; return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_add_twice(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_FP32, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 8, 8); return f8_adamw_add(f->opt, &p, &g, 0); }
static f8_status c_opt_add_stepped(fx *f) { f8_tensor p = tview(f, B_P, F8_DTYPE_FP32, 8, 8), g = tview(f, B_G, F8_DTYPE_FP32, 8, 8); return f8_adamw_add(f->opt_stepped, &p, &g, 0); }
static f8_status c_opt_add_huge(fx *f) { f8_tensor p = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 8), g = p; g.data = f->buf[B_Y]; return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_add_moments(fx *f) { f8_tensor p = tview(f, B_X, F8_DTYPE_BF16, (int64_t)1 << 61, 1), g = p; g.data = f->buf[B_Y]; return f8_adamw_add(f->opt, &p, &g, 1); }
static f8_status c_opt_step_null(fx *f) { (void)f; return f8_adamw_step(NULL); }
static f8_status c_opt_read_null(fx *f) { (void)f; int64_t s; return f8_adamw_read(NULL, &s, NULL, NULL); }

/* defect 3: a create that fails, three times in a row */
static f8_status c_create_oom_retry(fx *f)
{
    f8_linear_config c = f8_linear_config_default((int64_t)1 << 24, (int64_t)1 << 24);
    f8_status st = F8_OK;
    for (int i = 0; i < 3; i++) {
        f8_module *m = (f8_module *)f;
        st = f8_linear_create(f->ctx, &c, &m);
        CHECK(m == NULL, "failed create left *module set");
    }
    return st;
}
static f8_status c_mlp_oom_retry(fx *f)
{
    f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default((int64_t)1 << 24, (int64_t)1 << 23);
    c.fp8_weights = 1;
    f8_status st = F8_OK;
    for (int i = 0; i < 3; i++) {
        f8_module *m = NULL;
        st = f8_layernorm_mlp_create(f->ctx, &c, &m);
    }
    return st;
}
static const hcase MODULE_CASES[] = {
    /* module creation; defect 3 */
    {"linear_create NULL config", c_lin_create_nullcfg, F8_ERR_INVALID_ARGUMENT, "f8_linear_create"},
    {"linear_create NULL out", c_lin_create_nullout, F8_ERR_INVALID_ARGUMENT, "f8_linear_create"},
    {"linear_create in 0", c_lin_create_in0, F8_ERR_SHAPE, "f8_linear_create"},
    {"linear_create out 2^24+1", c_lin_create_big, F8_ERR_SHAPE, "f8_linear_create"},
    {"linear_create max_tokens -1", c_lin_create_tokens, F8_ERR_SHAPE, "max_tokens"},
    {"linear_create param e4m3", c_lin_create_pdtype, F8_ERR_DTYPE, "param_dtype"},
    {"linear_create fp8 = 7", c_lin_create_fp8flag, F8_ERR_INVALID_ARGUMENT, "config.fp8"},
    {"linear_create bias = -3", c_lin_create_biasflag, F8_ERR_INVALID_ARGUMENT, "config.bias"},
    {"linear_create fp8_weights without fp8", c_lin_create_fp8w, F8_ERR_INVALID_ARGUMENT, "fp8_weights"},
    {"layernorm_linear_create norm 3", c_lnl_create_norm, F8_ERR_INVALID_ARGUMENT, "normalization"},
    {"layernorm_linear_create eps NaN", c_lnl_create_eps, F8_ERR_INVALID_ARGUMENT, "eps"},
    {"layernorm_linear_create return_layernorm_output 2", c_lnl_create_ret, F8_ERR_INVALID_ARGUMENT, "return_layernorm_output"},
    {"layernorm_mlp_create activation 7", c_mlp_create_act, F8_ERR_INVALID_ARGUMENT, "activation"},
    {"layernorm_mlp_create ffn 2^23+1", c_mlp_create_ffn, F8_ERR_SHAPE, "f8_layernorm_mlp_create"},
    {"layernorm_mlp_create zero_centered_gamma 5", c_mlp_create_zc, F8_ERR_INVALID_ARGUMENT, "zero_centered_gamma"},
    {"linear_create 2^24 x 2^24, 3 times (defect 3)", c_create_oom_retry, F8_ERR_OUT_OF_MEMORY, ""},
    {"layernorm_mlp_create 2^24 x 2^23, 3 times (defect 3)", c_mlp_oom_retry, F8_ERR_OUT_OF_MEMORY, ""},
    /* module calls; defect 5 */
    {"param fc1_weight of a Linear", c_param_which, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param 99", c_param_enum, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param grad 2", c_param_grad2, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param NULL view", c_param_null, F8_ERR_INVALID_ARGUMENT, "f8_module_param"},
    {"param bias of a bias-less Linear", c_param_nobias, F8_ERR_STATE, "f8_module_param"},
    {"module_slot direction 3", c_slot_dir, F8_ERR_INVALID_ARGUMENT, "f8_module_slot"},
    {"module_slot backward 2", c_slot_index, F8_ERR_INVALID_ARGUMENT, "f8_module_slot"},
    {"module_slot NULL out", c_slot_nullout, F8_ERR_INVALID_ARGUMENT, "f8_module_slot"},
    {"set_main_grad unfused", c_main_grad_unfused, F8_ERR_STATE, "f8_module_set_main_grad"},
    {"set_main_grad bias", c_main_grad_bias, F8_ERR_INVALID_ARGUMENT, "f8_module_set_main_grad"},
    {"zero_grad NULL", c_zero_grad_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"saved_create NULL out", c_saved_create_null, F8_ERR_INVALID_ARGUMENT, "f8_module_saved_create"},
    {"write_weight transposed shape", c_write_weight_shape, F8_ERR_SHAPE, "f8_module_write_weight"},
    {"write_weight bias", c_write_weight_bias, F8_ERR_INVALID_ARGUMENT, "f8_module_write_weight"},
    {"write_weight [2^62+1, 64]", c_write_weight_huge, F8_ERR_SHAPE, "f8_module_write_weight"},
    {"forward NULL x", c_fwd_x_null, F8_ERR_INVALID_ARGUMENT, "f8_module_forward: x"},
    {"forward x [16, 63] (defect 5)", c_fwd_x_cols, F8_ERR_SHAPE, "expected [T, 64]"},
    {"forward x [2^62+1, 64] (defect 2)", c_fwd_x_huge, F8_ERR_SHAPE, "f8_module_forward: x"},
    {"forward x [2^32, 2^32]", c_fwd_x_2p32, F8_ERR_SHAPE, "f8_module_forward: x"},
    {"forward T > max_tokens", c_fwd_tokens, F8_ERR_SHAPE, "max_tokens"},
    {"forward x e4m3", c_fwd_x_fp8, F8_ERR_DTYPE, "f8_module_forward: x"},
    {"forward y rows", c_fwd_y_shape, F8_ERR_SHAPE, "f8_module_forward: y"},
    {"forward microbatch 3", c_fwd_mb, F8_ERR_INVALID_ARGUMENT, "microbatch"},
    {"forward saved of another module", c_fwd_other_saved, F8_ERR_INVALID_ARGUMENT, "another module"},
    {"forward NULL module", c_fwd_nullmod, F8_ERR_INVALID_ARGUMENT, NULL},
    {"backward before forward", c_bwd_before_fwd, F8_ERR_STATE, "f8_module_backward"},
    {"backward twice", c_bwd_twice, F8_ERR_STATE, "f8_module_backward"},
    {"backward saved of another module", c_bwd_other_saved, F8_ERR_INVALID_ARGUMENT, "another module"},
    {"backward NULL saved", c_bwd_null_saved, F8_ERR_INVALID_ARGUMENT, "saved"},
    {"backward dy cols", c_bwd_dy_shape, F8_ERR_SHAPE, "f8_module_backward: dy"},
    {"backward dy [2^62+1, 32]", c_bwd_dy_huge, F8_ERR_SHAPE, "f8_module_backward: dy"},
    {"backward dx cols", c_bwd_dx_shape, F8_ERR_SHAPE, "f8_module_backward: dx"},
    {"forward_add NULL residual", c_fwda_null, F8_ERR_INVALID_ARGUMENT, "residual is NULL"},
    {"forward_add residual cols", c_fwda_shape, F8_ERR_SHAPE, "f8_module_forward_add: residual"},
    {"forward_add residual bf16, y fp32", c_fwda_dtype, F8_ERR_DTYPE, "f8_module_forward_add: residual"},
    {"forward_add residual 4 bytes into y", c_fwda_overlap, F8_ERR_INVALID_ARGUMENT, "overlaps y in part"},
    {"backward_add NULL dx", c_bwda_null_dx, F8_ERR_INVALID_ARGUMENT, "dx is NULL"},
    {"backward_add dx over dy in part", c_bwda_overlap, F8_ERR_INVALID_ARGUMENT, "dx overlaps dy in part"},
    {"backward_add before forward", c_bwda_unfilled, F8_ERR_STATE, "f8_module_backward_add"},
    {"layernorm_linear_forward on a Linear", c_lnl_fwd_on_linear, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_forward"},
    {"layernorm_linear_forward ln_out unasked", c_lnl_fwd_lnout, F8_ERR_INVALID_ARGUMENT, "ln_out"},
    {"layernorm_linear_backward on an MLP", c_lnl_bwd_on_mlp, F8_ERR_INVALID_ARGUMENT, "f8_layernorm_linear_backward"},
    {"update_weight_scales NULL", c_update_wscales_null, F8_ERR_INVALID_ARGUMENT, NULL},
    /* graphs */
    {"graph_end without begin", c_graph_end_nobegin, F8_ERR_STATE, "f8_graph_end"},
    {"graph_begin twice", c_graph_begin_twice, F8_ERR_STATE, "f8_graph_begin"},
    {"upload while capturing", c_cap_upload, F8_ERR_STATE, "captur"},
    {"download while capturing", c_cap_download, F8_ERR_STATE, "captur"},
    {"alloc while capturing", c_cap_alloc, F8_ERR_STATE, "captur"},
    {"linear_create while capturing", c_cap_create, F8_ERR_STATE, "captur"},
    {"fill_normal while capturing", c_cap_fill, F8_ERR_STATE, "f8_tensor_fill_normal"},
    {"slot_read while capturing", c_cap_slot_read, F8_ERR_STATE, "captur"},
    {"checkpoint_add_tensor while capturing", c_cap_ck_add, F8_ERR_STATE, "captur"},
    {"attention_saved_create while capturing", c_cap_att_saved, F8_ERR_STATE, "f8_attention_saved_create"},
    {"graph_end of a spoiled capture", c_cap_end_spoiled, F8_ERR_STATE, "spoiled"},
    {"graph_end NULL out", c_cap_end_null, F8_ERR_INVALID_ARGUMENT, "f8_graph_end"},
    {"graph_replay while capturing", c_cap_replay, F8_ERR_STATE, "f8_graph_replay"},
    {"graph_replay NULL", c_replay_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"graph_begin NULL", c_begin_null, F8_ERR_INVALID_ARGUMENT, NULL},
    /* checkpoints; defect 4 */
    {"checkpoint_create NULL out", c_ck_create_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_create"},
    {"add_tensor NULL name", c_ck_add_noname, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor __metadata__", c_ck_add_meta, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor duplicate", c_ck_add_dup, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor invalid UTF-8 name", c_ck_add_utf8, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"add_tensor [2^32, 2^32]", c_ck_add_huge, F8_ERR_SHAPE, "f8_checkpoint_add_tensor"},
    {"add_tensor dtype -1", c_ck_add_dtype, F8_ERR_DTYPE, "f8_checkpoint_add_tensor"},
    {"add_tensor NULL data", c_ck_add_nodata, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_tensor"},
    {"read_tensor missing", c_ck_read_missing, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_read_tensor"},
    {"read_tensor dtype", c_ck_read_dtype, F8_ERR_DTYPE, "f8_checkpoint_read_tensor"},
    {"read_tensor shape", c_ck_read_shape, F8_ERR_SHAPE, "f8_checkpoint_read_tensor"},
    {"read_tensor [2^62+1, 4]", c_ck_read_huge, F8_ERR_SHAPE, "f8_checkpoint_read_tensor"},
    {"set_metadata format", c_ck_meta_format, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"set_metadata f8.*", c_ck_meta_f8, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"set_metadata NULL value", c_ck_meta_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"set_metadata invalid UTF-8", c_ck_meta_utf8, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_set_metadata"},
    {"load missing file", c_ck_load_missing, F8_ERR_IO, "f8_checkpoint_load"},
    {"load NULL path", c_ck_load_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_load"},
    {"load_memory truncated JSON", c_ck_load_garbage, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_load"},
    {"load_memory 3 bytes", c_ck_load_short, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_load"},
    {"save into a missing directory", c_ck_save_dir, F8_ERR_IO, "f8_checkpoint_save"},
    {"add_module after m.bias (defect 4)", c_ck_add_module_clash, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module"},
    {"add_module other ctx", c_ck_add_module_ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module"},
    {"add_module NULL prefix", c_ck_add_module_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_module"},
    {"restore_module incomplete", c_ck_restore_missing, F8_ERR_INVALID_ARGUMENT, "m.weight"},
    {"add_adamw NULL prefix", c_ck_add_adamw_null, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_adamw"},
    {"add_adamw other ctx", c_ck_add_adamw_ctx, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_add_adamw"},
    {"restore_adamw missing", c_ck_restore_adamw, F8_ERR_INVALID_ARGUMENT, "f8_checkpoint_restore_adamw"},
    /* training blocks */
    {"embedding_forward NULL tokens", c_emb_tokens, F8_ERR_INVALID_ARGUMENT, "f8_embedding_forward"},
    {"embedding_forward seq_len 0", c_emb_seq0, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_forward wpe too short", c_emb_wpe, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_forward y cols", c_emb_cols, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_forward y overlaps wte", c_emb_overlap, F8_ERR_INVALID_ARGUMENT, "f8_embedding_forward"},
    {"embedding_forward wte e4m3", c_emb_fp8, F8_ERR_DTYPE, "f8_embedding_forward"},
    {"embedding_forward wte [2^62+1, 32]", c_emb_huge, F8_ERR_SHAPE, "f8_embedding_forward"},
    {"embedding_backward NULL dwte", c_emb_bwd_null, F8_ERR_INVALID_ARGUMENT, "f8_embedding_backward"},
    {"embedding_backward [2^32, 2^32]", c_emb_bwd_huge, F8_ERR_SHAPE, "f8_embedding_backward"},
    {"embedding_backward dy overlaps dwte", c_emb_bwd_overlap, F8_ERR_INVALID_ARGUMENT, "f8_embedding_backward"},
    {"attention_create n_head 0", c_att_create_heads, F8_ERR_SHAPE, "f8_attention_create"},
    {"attention_create e4m3", c_att_create_dtype, F8_ERR_DTYPE, "f8_attention_create"},
    {"attention_create max_batch 2^24+1", c_att_create_batch, F8_ERR_SHAPE, "f8_attention_create"},
    {"attention_create NULL config", c_att_create_null, F8_ERR_INVALID_ARGUMENT, "f8_attention_create"},
    {"attention_saved_create NULL out", c_att_saved_null, F8_ERR_INVALID_ARGUMENT, "f8_attention_saved_create"},
    {"attention_forward batch 3", c_att_fwd_batch, F8_ERR_SHAPE, "f8_attention_forward"},
    {"attention_forward qkv cols", c_att_fwd_cols, F8_ERR_SHAPE, "f8_attention_forward: qkv"},
    {"attention_forward qkv bf16", c_att_fwd_dtype, F8_ERR_DTYPE, "f8_attention_forward: qkv"},
    {"attention_forward saved of another attention", c_att_fwd_other, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward"},
    {"attention_forward y overlaps qkv", c_att_fwd_overlap, F8_ERR_INVALID_ARGUMENT, "f8_attention_forward"},
    {"attention_forward qkv [2^32, 2^32]", c_att_fwd_huge, F8_ERR_SHAPE, "f8_attention_forward: qkv"},
    {"attention_backward before forward", c_att_bwd_unfilled, F8_ERR_STATE, "f8_attention_backward"},
    {"attention_backward saved of another attention", c_att_bwd_other, F8_ERR_INVALID_ARGUMENT, "f8_attention_backward"},
    {"cross_entropy vocab 0", c_ce_vocab0, F8_ERR_SHAPE, "f8_cross_entropy"},
    {"cross_entropy vocab > cols", c_ce_vocab_big, F8_ERR_SHAPE, "f8_cross_entropy"},
    {"cross_entropy NULL targets", c_ce_targets, F8_ERR_INVALID_ARGUMENT, "f8_cross_entropy"},
    {"cross_entropy NULL losses", c_ce_losses, F8_ERR_INVALID_ARGUMENT, "f8_cross_entropy"},
    {"cross_entropy dlogits aliases logits as bf16", c_ce_overlap, F8_ERR_INVALID_ARGUMENT, "f8_cross_entropy"},
    {"cross_entropy logits [2^62+1, 40]", c_ce_huge, F8_ERR_SHAPE, "f8_cross_entropy"},
    {"adamw_create lr -1", c_opt_create_lr, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create beta2 1", c_opt_create_beta, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create eps NaN", c_opt_create_eps, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create total < warmup", c_opt_create_steps, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_create NULL out", c_opt_create_null, F8_ERR_INVALID_ARGUMENT, "f8_adamw_create"},
    {"adamw_add shapes differ", c_opt_add_shape, F8_ERR_SHAPE, "f8_adamw_add"},
    {"adamw_add e4m3 param", c_opt_add_dtype, F8_ERR_DTYPE, "f8_adamw_add"},
    {"adamw_add twice", c_opt_add_twice, F8_ERR_INVALID_ARGUMENT, "f8_adamw_add"},
    {"adamw_add after a step", c_opt_add_stepped, F8_ERR_STATE, "f8_adamw_add"},
    {"adamw_add [2^62+1, 8]", c_opt_add_huge, F8_ERR_SHAPE, "f8_adamw_add"},
    {"adamw_add bf16 [2^61, 1]: moments past 2^62 bytes", c_opt_add_moments, F8_ERR_OUT_OF_MEMORY, "f8_adamw_add"},
    {"adamw_step NULL", c_opt_step_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"adamw_read NULL", c_opt_read_null, F8_ERR_INVALID_ARGUMENT, NULL},
};

#endif /* F8_TESTS_HOSTILE_MODULE_CASES_H */
