/*
 * hostile_ctx_cases.h — hostile calls of the ctx and what hangs off it
 * directly: memory, tensors, scaling slots and qtensors (CTX_CASES; the
 * harness is in hostile_cases.h).
 */
#ifndef F8_TESTS_HOSTILE_CTX_CASES_H
#define F8_TESTS_HOSTILE_CTX_CASES_H

#include "hostile_fixture.h"

/* ctx and memory */
static f8_status c_alloc_null(fx *f) { return f8_ctx_alloc(f->ctx, 16, NULL); }
static f8_status c_alloc_sizemax(fx *f) { void *p = &p; return f8_ctx_alloc(f->ctx, SIZE_MAX, &p); }
static f8_status c_alloc_wrap(fx *f) { void *p = NULL; return f8_ctx_alloc(f->ctx, SIZE_MAX - 254, &p); }
static f8_status c_alloc_2p62(fx *f) { void *p = NULL; return f8_ctx_alloc(f->ctx, ((size_t)1 << 62) + 1, &p); }
static f8_status c_alloc_nullctx(fx *f) { void *p = NULL; (void)f; return f8_ctx_alloc(NULL, 16, &p); }
static f8_status c_upload_null(fx *f) { return f8_ctx_upload(f->ctx, f->buf[B_X], NULL, 16); }
static f8_status c_upload_nulldst(fx *f) { float h[4] = {0}; return f8_ctx_upload(f->ctx, NULL, h, 16); }
static f8_status c_download_null(fx *f) { return f8_ctx_download(f->ctx, NULL, f->buf[B_X], 16); }
static f8_status c_copy_null(fx *f) { return f8_ctx_copy(f->ctx, f->buf[B_X], NULL, 16); }
static f8_status c_sync_null(fx *f) { (void)f; return f8_ctx_synchronize(NULL); }
static f8_status c_noop_null(fx *f) { (void)f; return f8_ctx_set_noop_flag(NULL, 1.0f); }
static f8_status c_wnoop_null(fx *f) { (void)f; return f8_ctx_set_weight_noop(NULL, 1); }
static f8_status c_memory_null(fx *f) { return f8_ctx_memory(f->ctx, NULL); }
static f8_status c_counters_null(fx *f) { return f8_ctx_counters_read(f->ctx, NULL); }
static f8_status c_module_memory_null(fx *f) { return f8_module_memory(f->lin, NULL); }

/* tensors */
static f8_status c_zero_null(fx *f) { return f8_tensor_zero(f->ctx, NULL); }
static f8_status c_zero_huge(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 4); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_2p32(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_neg(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, -1, 4); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_dtype(fx *f) { f8_tensor t = tview(f, B_X, (f8_dtype)9, 4, 4); return f8_tensor_zero(f->ctx, &t); }
static f8_status c_zero_nodata(fx *f) { f8_tensor t = f8_tensor_make(NULL, F8_DTYPE_FP32, 4, 4); (void)f; return f8_tensor_zero(f->ctx, &t); }
static f8_status c_fill_2p32(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_tensor_fill_normal(f->ctx, &t, 1.0, 1); }
static f8_status c_fill_huge(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_BF16, 4, H_HUGE); return f8_tensor_fill_normal(f->ctx, &t, 1.0, 1); }
static f8_status c_fill_negstd(fx *f) { f8_tensor t = X32(f); return f8_tensor_fill_normal(f->ctx, &t, -1.0, 1); }
static f8_status c_fill_nanstd(fx *f) { f8_tensor t = X32(f); return f8_tensor_fill_normal(f->ctx, &t, NAN, 1); }
static f8_status c_fill_fp8(fx *f) { f8_tensor t = tview(f, B_X, F8_DTYPE_E4M3, 4, 4); t.scale_inv = (float *)f->buf[B_LOSS]; return f8_tensor_fill_normal(f->ctx, &t, 1.0, 1); }
static f8_status c_convert_shape(fx *f) { f8_tensor s = X32(f), d = tview(f, B_Y, F8_DTYPE_BF16, H_T, H_K - 1); return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_convert_fp8dst(fx *f) { f8_tensor s = X32(f), d = tview(f, B_Y, F8_DTYPE_E5M2, H_T, H_K); d.scale_inv = (float *)f->buf[B_LOSS]; return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_convert_nosinv(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_E4M3, 4, 4), d = tview(f, B_Y, F8_DTYPE_FP32, 4, 4); return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_convert_huge(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 1), d = tview(f, B_Y, F8_DTYPE_FP32, H_HUGE + 1, 1); return f8_tensor_convert(f->ctx, &s, &d); }
static f8_status c_add_dtype(fx *f) { f8_tensor s = X32(f), d = tview(f, B_Y, F8_DTYPE_BF16, H_T, H_K); return f8_tensor_add(f->ctx, &d, &s); }
static f8_status c_add_2p32(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32), d = s; d.data = f->buf[B_Y]; return f8_tensor_add(f->ctx, &d, &s); }
static f8_status c_add_null(fx *f) { f8_tensor d = Y32(f); return f8_tensor_add(f->ctx, &d, NULL); }

/* slots */
static f8_status c_slots_dir(fx *f) { f8_slot s[2]; return f8_ctx_slots_create(f->ctx, (f8_direction)5, 2, s); }
static f8_status c_slots_count0(fx *f) { f8_slot s[2]; return f8_ctx_slots_create(f->ctx, F8_DIR_FORWARD, 0, s); }
static f8_status c_slots_countneg(fx *f) { f8_slot s[2]; return f8_ctx_slots_create(f->ctx, F8_DIR_BACKWARD, -1, s); }
static f8_status c_slots_null(fx *f) { return f8_ctx_slots_create(f->ctx, F8_DIR_FORWARD, 2, NULL); }
static f8_status c_slot_read_unreg(fx *f) { float s; return f8_slot_read(f->ctx, f->unreg, &s, NULL, NULL); }
static f8_status c_slot_read_dir(fx *f) { f8_slot sl = {7, 0}; float s; return f8_slot_read(f->ctx, sl, &s, NULL, NULL); }
static f8_status c_slot_write_neg(fx *f) { f8_slot sl = {0, -1}; return f8_slot_write(f->ctx, sl, 2.0f, 0.5f, NULL); }
static f8_status c_update_dir(fx *f) { return f8_ctx_update_scales(f->ctx, (f8_direction)2); }

/* qtensor */
static f8_status c_q_create_dtype(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_FP32, 4, 4, &q); }
static f8_status c_q_create_2p32(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_E4M3, (int64_t)1 << 32, (int64_t)1 << 32, &q); }
static f8_status c_q_create_huge(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_E5M2, H_HUGE + 1, 1, &q); }
static f8_status c_q_create_neg(fx *f) { f8_qtensor *q = NULL; return f8_qtensor_create(f->ctx, F8_DTYPE_E4M3, 4, -4, &q); }
static f8_status c_q_create_null(fx *f) { return f8_qtensor_create(f->ctx, F8_DTYPE_E4M3, 4, 4, NULL); }
static f8_status c_q_quant_shape(fx *f) { f8_slot sl = {0, 0}; f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, 16, 8); return f8_qtensor_quantize(f->q, &s, sl, 1, NULL); }
static f8_status c_q_quant_unreg(fx *f) { f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, 8, 16); return f8_qtensor_quantize(f->q, &s, f->unreg, 1, NULL); }
static f8_status c_q_quant_fp8(fx *f) { f8_slot sl = {0, 0}; f8_tensor s = tview(f, B_X, F8_DTYPE_E4M3, 8, 16); s.scale_inv = (float *)f->buf[B_LOSS]; return f8_qtensor_quantize(f->q, &s, sl, 0, NULL); }
static f8_status c_q_quant_huge(fx *f) { f8_slot sl = {0, 0}; f8_tensor s = tview(f, B_X, F8_DTYPE_FP32, H_HUGE + 1, 16); return f8_qtensor_quantize(f->q, &s, sl, 0, NULL); }
static f8_status c_q_tinto_shape(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_E4M3, 8, 16); return f8_qtensor_transpose_into(f->q, &d); }
static f8_status c_q_tinto_dtype(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_E5M2, 16, 8); return f8_qtensor_transpose_into(f->q, &d); }
static f8_status c_q_tinto_null(fx *f) { return f8_qtensor_transpose_into(f->q, NULL); }
static f8_status c_q_deq_dtype(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_E4M3, 8, 16); d.scale_inv = (float *)f->buf[B_LOSS]; return f8_qtensor_dequantize(f->q, &d); }
static f8_status c_q_deq_huge(fx *f) { f8_tensor d = tview(f, B_Y, F8_DTYPE_FP32, (int64_t)1 << 32, (int64_t)1 << 32); return f8_qtensor_dequantize(f->q, &d); }
static f8_status c_q_data_null(fx *f) { return f8_qtensor_data(f->q, NULL); }
static f8_status c_q_tdata_invalid(fx *f) { f8_tensor v; return f8_qtensor_transpose_data(f->q, &v); }
static f8_status c_q_upload_null(fx *f) { return f8_qtensor_upload(f->q, NULL, 1.0f); }
static f8_status c_q_transpose_nullq(fx *f) { (void)f; return f8_qtensor_transpose(NULL, NULL); }

static const hcase CTX_CASES[] = {
    /* ctx and memory; defect 1 */
    {"alloc NULL out", c_alloc_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_alloc"},
    {"alloc SIZE_MAX (defect 1)", c_alloc_sizemax, F8_ERR_OUT_OF_MEMORY, "f8_ctx_alloc"},
    {"alloc SIZE_MAX-254 (defect 1)", c_alloc_wrap, F8_ERR_OUT_OF_MEMORY, "f8_ctx_alloc"},
    {"alloc 2^62+1", c_alloc_2p62, F8_ERR_OUT_OF_MEMORY, "f8_ctx_alloc"},
    {"alloc NULL ctx", c_alloc_nullctx, F8_ERR_INVALID_ARGUMENT, NULL},
    {"upload NULL src", c_upload_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_upload"},
    {"upload NULL dst", c_upload_nulldst, F8_ERR_INVALID_ARGUMENT, "f8_ctx_upload"},
    {"download NULL dst", c_download_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_download"},
    {"copy NULL src", c_copy_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_copy"},
    {"synchronize NULL", c_sync_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"set_noop_flag NULL", c_noop_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"set_weight_noop NULL", c_wnoop_null, F8_ERR_INVALID_ARGUMENT, NULL},
    {"memory NULL report (defect 5)", c_memory_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_memory"},
    {"counters NULL (defect 5)", c_counters_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_counters_read"},
    {"module_memory NULL", c_module_memory_null, F8_ERR_INVALID_ARGUMENT, "f8_module_memory"},
    /* tensors; defect 2 */
    {"zero NULL", c_zero_null, F8_ERR_INVALID_ARGUMENT, "f8_tensor_zero"},
    {"zero [2^62+1, 4] (defect 2)", c_zero_huge, F8_ERR_SHAPE, "f8_tensor_zero"},
    {"zero [2^32, 2^32] (defect 2)", c_zero_2p32, F8_ERR_SHAPE, "f8_tensor_zero"},
    {"zero negative", c_zero_neg, F8_ERR_SHAPE, "f8_tensor_zero"},
    {"zero dtype 9", c_zero_dtype, F8_ERR_DTYPE, "f8_tensor_zero"},
    {"zero NULL data", c_zero_nodata, F8_ERR_INVALID_ARGUMENT, "f8_tensor_zero"},
    {"fill_normal [2^32, 2^32] (defect 2)", c_fill_2p32, F8_ERR_SHAPE, "f8_tensor_fill_normal"},
    {"fill_normal [4, 2^62] bf16", c_fill_huge, F8_ERR_SHAPE, "f8_tensor_fill_normal"},
    {"fill_normal std -1", c_fill_negstd, F8_ERR_INVALID_ARGUMENT, "f8_tensor_fill_normal"},
    {"fill_normal std NaN", c_fill_nanstd, F8_ERR_INVALID_ARGUMENT, "f8_tensor_fill_normal"},
    {"fill_normal e4m3", c_fill_fp8, F8_ERR_DTYPE, "f8_tensor_fill_normal"},
    {"convert shapes differ", c_convert_shape, F8_ERR_SHAPE, "f8_tensor_convert"},
    {"convert to e5m2", c_convert_fp8dst, F8_ERR_DTYPE, "f8_tensor_convert"},
    {"convert e4m3 without scale_inv", c_convert_nosinv, F8_ERR_INVALID_ARGUMENT, "f8_tensor_convert"},
    {"convert [2^62+1, 1]", c_convert_huge, F8_ERR_SHAPE, "f8_tensor_convert"},
    {"add dtypes differ", c_add_dtype, F8_ERR_DTYPE, "f8_tensor_add"},
    {"add [2^32, 2^32]", c_add_2p32, F8_ERR_SHAPE, "f8_tensor_add"},
    {"add NULL src", c_add_null, F8_ERR_INVALID_ARGUMENT, "f8_tensor_add"},
    /* slots */
    {"slots_create direction 5", c_slots_dir, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slots_create count 0", c_slots_count0, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slots_create count -1", c_slots_countneg, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slots_create NULL out", c_slots_null, F8_ERR_INVALID_ARGUMENT, "f8_ctx_slots_create"},
    {"slot_read unregistered", c_slot_read_unreg, F8_ERR_INVALID_ARGUMENT, "f8_slot_read"},
    {"slot_read direction 7", c_slot_read_dir, F8_ERR_INVALID_ARGUMENT, "f8_slot_read"},
    {"slot_write index -1", c_slot_write_neg, F8_ERR_INVALID_ARGUMENT, "f8_slot_write"},
    {"update_scales direction 2", c_update_dir, F8_ERR_INVALID_ARGUMENT, "f8_ctx_update_scales"},
    /* qtensor */
    {"qtensor_create fp32", c_q_create_dtype, F8_ERR_DTYPE, "f8_qtensor_create"},
    {"qtensor_create [2^32, 2^32]", c_q_create_2p32, F8_ERR_SHAPE, "f8_qtensor_create"},
    {"qtensor_create [2^62+1, 1]", c_q_create_huge, F8_ERR_SHAPE, "f8_qtensor_create"},
    {"qtensor_create negative", c_q_create_neg, F8_ERR_SHAPE, "f8_qtensor_create"},
    {"qtensor_create NULL out", c_q_create_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_create"},
    {"quantize shape", c_q_quant_shape, F8_ERR_SHAPE, "f8_qtensor_quantize"},
    {"quantize unregistered slot", c_q_quant_unreg, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_quantize"},
    {"quantize e4m3 src", c_q_quant_fp8, F8_ERR_DTYPE, "f8_qtensor_quantize"},
    {"quantize [2^62+1, 16]", c_q_quant_huge, F8_ERR_SHAPE, "f8_qtensor_quantize"},
    {"transpose_into shape", c_q_tinto_shape, F8_ERR_SHAPE, "f8_qtensor_transpose_into"},
    {"transpose_into dtype", c_q_tinto_dtype, F8_ERR_DTYPE, "f8_qtensor_transpose_into"},
    {"transpose_into NULL", c_q_tinto_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_transpose_into"},
    {"dequantize to e4m3", c_q_deq_dtype, F8_ERR_DTYPE, "f8_qtensor_dequantize"},
    {"dequantize [2^32, 2^32]", c_q_deq_huge, F8_ERR_SHAPE, "f8_qtensor_dequantize"},
    {"qtensor_data NULL", c_q_data_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_data"},
    {"transpose_data before a transpose", c_q_tdata_invalid, F8_ERR_STATE, "f8_qtensor_transpose_data"},
    {"qtensor_upload NULL codes", c_q_upload_null, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_upload"},
    {"qtensor_transpose NULL", c_q_transpose_nullq, F8_ERR_INVALID_ARGUMENT, NULL},
};

#endif /* F8_TESTS_HOSTILE_CTX_CASES_H */
