/*
 * dev/cuda/fp8_sdpa_probe.cu — cuDNN's FP8 flash-attention forward, alone,
 * against an FP64 CPU reference of the same quantized numerics (issue 31,
 * point 1). Not built by the Makefile; dev/cuda/fp8_sdpa_probe.sh builds and
 * runs it (nvcc, -lcudnn, cuDNN's backend API from cudnn_graph.h: no
 * frontend).
 *
 * The graph is the one f8 drives (src/cuda/attention_cudnn_fp8.cu), which is
 * the operation list of cudnn-frontend's SDPA FP8 node:
 *   S = Q8·K8ᵀ · attn_scale · descale_q · descale_k; causal select with
 *   GEN_INDEX/CMP_GE; m = max, e = exp(S - m), l = Σ e, Stats = m + log l,
 *   P = e / l; amax_s = AMAX(P); P8 = P · scale_s (E4M3 virtual);
 *   O = P8·V8 · descale_s · descale_v; O8 = O · scale_o; amax_o = AMAX(O).
 * Each case may change one thing at a time (layout, Stats or not, mask,
 * mask value, engine config), so a wrong result can be pinned on one of them.
 *
 * The reference (FP64, per (b, h, query) row): the inputs are the decoded
 * E4M3 codes; "exact" keeps P unquantized, "chain" rounds P·scale_s to E4M3
 * as the graph says (normalized P: cuDNN's kernel rounds its own blocked,
 * unnormalized P instead, so its error is compared with the chain's, not
 * with the chain). A case passes when the GPU's whole-tensor error against
 * "exact" is within 1.25x the chain's + 0.01, its worst row within 2x the
 * chain's worst + 0.05, Stats within 1e-3, amax_o within 10%, amax_s within
 * 1e-3, nothing left unwritten, and three executions agree bitwise.
 *
 * Usage: fp8_sdpa_probe [-t seconds] CASE...   CASE = B,S,nh,hd[:flags]
 *        fp8_sdpa_probe -selftest   (the judge on planted outputs; no GPU)
 *        fp8_sdpa_probe -graphs CASE...  (builds each case's tensors and
 *             operations, no handle: catches a malformed graph without a GPU)
 *   Each case prints one line (REFUSED with cuDNN's reasons, or ok/FAIL
 *   with the numbers); with more than one case a table of short lines ends
 *   the run.
 *   flags: s  separate Q, K, V buffers in [b,h,s,d] (default: f8's interleaved
 *             (B·S, 3C) rows, "bs3hd")
 *          i  inference form (Stats virtual, not an output)
 *          n  no causal mask
 *          F  mask value -FLT_MAX instead of -inf
 *          a  amplitude 4 inputs (default 1)
 *          p  head_dim zero-padded to 128 in the graph (Q, K, V and O rows of
 *             128; the scores and the first hd columns of O are unchanged):
 *             the workaround to try if only hd 128 is right
 *          f  the scalars packed as f8 placed them (16 bytes apart, one pointer
 *             for the three descales, the amaxes right after)
 *          b  then the FP8 backward (fp8_sdpa_bwd.h) on this forward's outputs
 *             (needs the training form: not with i; needs O in E4M3)
 *          0-7 the heuristics' engine config to use (default: the first that
 *             finalizes)
 *   The current-scaling forms (docs/FP8_ATTENTION.md, "Session 8"; run them
 *   all with fp8_sdpa_probe.sh -cs). Default O: E4M3 with scale_o a device
 *   tensor holding 448/amax(V), the delayed-scaling graph.
 *          q  O in E4M3 with scale_o = the QKV scale (448/amax(Q,K,V): |O| <=
 *             max|V|, so no amax of O is needed first): the delayed graph
 *             fed only what current scaling knows before the call
 *          B  O typed BF16 (current scaling as TE builds it: scale_o a
 *             by-value 1, amax_o still an output; f8's former DIR_FWD_CS)
 *          H  O typed FP16 instead (with B's scale_o)
 *          d  (with B or H) scale_o a [1,1,1,1] FP32 device tensor holding 1.0
 *          x  (with B or H) no scale_o multiply: descale_v writes O, and
 *             amax_o is the AMAX of the output O itself
 *          A  no amax_o output (no AMAX of O at all)
 *          S  no amax_s output (no AMAX of P)
 *          V  scale_s a by-value 448 (cudnn-frontend's current-scaling sample)
 *             instead of a device tensor
 *          e  where heuristics mode A gives no plan: modes B and FALLBACK,
 *             then every engine by global index (default knobs, at most 5 s);
 *             the first plan found runs and is judged
 *   With O in BF16/FP16 the reference's "chain" rounds O to that type, not to
 *   E4M3 (O is not quantized), and scale_o is 1.
 */
#include <stdarg.h>
#include <time.h>

#include "fp8_sdpa_common.h"

/* ---- one case ------------------------------------------------------------ */

enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF, U_DQ, U_DK, U_DV, U_SS, U_DS, U_SO, U_AS, U_AO, N_UID = 15 };

enum { O_E4M3, O_BF16, O_FP16 };          /* O's type */
enum { SO_DEV, SO_BYVAL, SO_NONE };         /* scale_o: device tensor, by-value, no multiply */

typedef struct pcase {
    int64_t B, S, nh, hd;
    int64_t gd;       /* the graph's head_dim: hd, or 128 when padded */
    int separate, inference, nocausal, flt_max, backward, packed, config; /* config -1: first that finalizes */
    int otype, so_form, so_qkv, no_amax_o, no_amax_s, ss_byval, search;  /* the current-scaling forms */
    double amp;
    char name[320], form[160], shape[48];
} pcase;

/* One short line a case, printed again at the end (the -cs run's table). */
static char summary[256][400];
static int n_summary;
static void note(const pcase *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const pcase *c, const char *fmt, ...)
{
    if (n_summary == (int)(sizeof summary / sizeof summary[0])) return;
    char *l = summary[n_summary++];
    const int k = snprintf(l, sizeof summary[0], "%-18s %-60s ", c->shape, c->form);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l + k, sizeof summary[0] - k, fmt, ap);
    va_end(ap);
}

static int o_bytes(const pcase *c) { return c->otype == O_E4M3 ? 1 : 2; }

/* Element i of an O buffer of the case's type, decoded. */
static double o_value(const pcase *c, const void *o, int64_t i)
{
    if (c->otype == O_E4M3) return e4m3_value(((const uint8_t *)o)[i]);
    const uint16_t u = ((const uint16_t *)o)[i];
    return c->otype == O_BF16 ? bf16_value(u) : fp16_value(u);
}

/* Store x (a value of O times scale_o; NaN: an unwritten one) into element i. */
static void o_store(const pcase *c, void *o, int64_t i, double x)
{
    if (c->otype == O_E4M3) ((uint8_t *)o)[i] = isnan(x) ? 0x7f : e4m3_code(x);
    else ((uint16_t *)o)[i] = c->otype == O_BF16 ? bf16_code(x) : fp16_code(x);
}

/* x rounded to O's type after scale_o, back in O's units (the chain's O). */
static double o_round(const pcase *c, double x, double scale_o)
{
    return c->otype == O_E4M3 ? e4m3_round(x * scale_o) / scale_o : c->otype == O_BF16 ? bf16_round(x) : fp16_round(x);
}

static int parse_case(const char *arg, pcase *c)
{
    memset(c, 0, sizeof *c);
    c->config = -1;
    c->amp = 1.0;
    long long B, S, nh, hd;
    if (sscanf(arg, "%lld,%lld,%lld,%lld", &B, &S, &nh, &hd) != 4) return 0;
    c->B = B, c->S = S, c->nh = nh, c->hd = c->gd = hd;
    int so_dev = 0, so_none = 0;
    const char *f = strchr(arg, ':');
    for (f = f ? f + 1 : ""; *f; f++) {
        if (*f == 's') c->separate = 1;
        else if (*f == 'i') c->inference = 1;
        else if (*f == 'n') c->nocausal = 1;
        else if (*f == 'F') c->flt_max = 1;
        else if (*f == 'a') c->amp = 4.0;
        else if (*f == 'p') c->gd = hd < 128 ? 128 : hd;
        else if (*f == 'b') c->backward = 1;
        else if (*f == 'f') c->packed = 1;
        else if (*f == 'q') c->so_qkv = 1;
        else if (*f == 'B') c->otype = c->otype == O_FP16 ? -1 : O_BF16;
        else if (*f == 'H') c->otype = c->otype == O_BF16 ? -1 : O_FP16;
        else if (*f == 'd') so_dev = 1;
        else if (*f == 'x') so_none = 1;
        else if (*f == 'A') c->no_amax_o = 1;
        else if (*f == 'S') c->no_amax_s = 1;
        else if (*f == 'V') c->ss_byval = 1;
        else if (*f == 'e') c->search = 1;
        else if (*f >= '0' && *f <= '7') c->config = *f - '0';
        else return 0;
    }
    const int f16 = c->otype == O_BF16 || c->otype == O_FP16;
    if (c->otype < 0 || (c->backward && (c->inference || f16)) || (so_dev && so_none) || ((so_dev || so_none) && !f16) ||
        (c->so_qkv && f16))
        return 0;
    c->so_form = !f16 || so_dev ? SO_DEV : so_none ? SO_NONE : SO_BYVAL;
    char *form = c->form;
    snprintf(c->shape, sizeof c->shape, "%lld,%lld,%lld,%lld", B, S, nh, hd);
    snprintf(form, sizeof c->form, "O %s, %s%s%s%s%s", c->otype == O_E4M3 ? "e4m3" : c->otype == O_BF16 ? "bf16" : "fp16",
             !f16 ? (c->so_qkv ? "scale_o dev = scale_qkv" : "scale_o dev 448/amax(V)")
             : c->so_form == SO_DEV ? "scale_o dev 1.0" : c->so_form == SO_BYVAL ? "scale_o by-value 1" : "no scale_o",
             c->no_amax_o ? ", no amax_o" : c->so_form == SO_NONE ? ", amax_o of O" : "", c->no_amax_s ? ", no amax_s" : "",
             c->ss_byval ? ", scale_s by-value" : "", c->inference ? ", no Stats" : "");
    snprintf(c->name, sizeof c->name, "B%lld S%lld nh%lld hd%lld {%s} [%s%s,%s,%s,%s,amp %g,cfg %d%s%s%s]", B, S, nh, hd,
             form, c->gd != hd ? "padded to 128," : "",
             c->separate ? "bhsd" : "bs3hd", c->inference ? "infer" : "train", c->nocausal ? "full" : "causal",
             c->flt_max ? "-FLT_MAX" : "-inf", c->amp, c->config, c->packed ? ",packed scalars" : "", c->backward ? ",+bwd" : "",
             c->search ? ",every engine" : "");
    return 1;
}

/* The graphs' dims and element strides for a case, at the graph's head_dim:
 * Q (V, dQ...) as [b,h,s,d] and Kᵀ (Vᵀ) as [b,h,d,s] in the case's layout,
 * O and dO in (B·S, C) rows, scores and their transpose, per-row tensors,
 * packed FP32 accumulators, and the dO ⊙ O product (the frontend's strides). */
typedef struct gdims {
    int64_t one[4], qd[4], ktd[4], qs[4], kts[4], os[4], ssd[4], sss[4], sst[4], rd[4], rs[4], acc[4], dot[4];
} gdims;

static void dims_of(const pcase *c, gdims *g)
{
    const int64_t B = c->B, S = c->S, h = c->nh, d = c->gd, C = h * d;
    const int64_t v[13][4] = {{1, 1, 1, 1},
                              {B, h, S, d},
                              {B, h, d, S},
                              {c->separate ? h * S * d : S * 3 * C, c->separate ? S * d : d, c->separate ? d : 3 * C, 1},
                              {c->separate ? h * S * d : S * 3 * C, c->separate ? S * d : d, 1, c->separate ? d : 3 * C},
                              {S * C, d, C, 1},
                              {B, h, S, S},
                              {h * S * S, S * S, S, 1},
                              {h * S * S, S * S, 1, S},
                              {B, h, S, 1},
                              {h * S, S, 1, 1},
                              {h * S * d, S * d, d, 1},
                              {h * S * d, S * d, h * d, 1}};
    memcpy(g, v, sizeof v);
}

static void build_graph(bld *b, const pcase *c)
{
    gdims g;
    dims_of(c, &g);
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, E = CUDNN_DATA_FP8_E4M3;

    cudnnBackendDescriptor_t q = tensor(b, U_Q, E, g.qd, g.qs, 0, 0, "Q"), kt = tensor(b, U_K, E, g.ktd, g.kts, 0, 0, "K^T");
    const cudnnDataType_t OT = c->otype == O_BF16 ? CUDNN_DATA_BFLOAT16 : c->otype == O_FP16 ? CUDNN_DATA_HALF : E;
    cudnnBackendDescriptor_t v = tensor(b, U_V, E, g.qd, g.qs, 0, 0, "V"), o = tensor(b, U_O, OT, g.qd, g.os, 0, 0, "O");
    cudnnBackendDescriptor_t st = tensor(b, c->inference ? -1 : U_STATS, F, g.rd, g.rs, c->inference, 0, "Stats");
    cudnnBackendDescriptor_t sc = tensor(b, U_SCALE, F, g.one, g.one, 0, 1, "attn_scale");
    cudnnBackendDescriptor_t ninf = tensor(b, U_NEG_INF, F, g.one, g.one, 0, 1, "mask value");
    cudnnBackendDescriptor_t dq = tensor(b, U_DQ, F, g.one, g.one, 0, 0, "descale_q");
    cudnnBackendDescriptor_t dk = tensor(b, U_DK, F, g.one, g.one, 0, 0, "descale_k");
    cudnnBackendDescriptor_t dv = tensor(b, U_DV, F, g.one, g.one, 0, 0, "descale_v");
    cudnnBackendDescriptor_t ss = tensor(b, U_SS, F, g.one, g.one, 0, c->ss_byval, "scale_s");
    cudnnBackendDescriptor_t ds = tensor(b, U_DS, F, g.one, g.one, 0, 0, "descale_s");
    cudnnBackendDescriptor_t so =
        c->so_form == SO_NONE ? NULL : tensor(b, U_SO, F, g.one, g.one, 0, c->so_form == SO_BYVAL, "scale_o");
    cudnnBackendDescriptor_t as = c->no_amax_s ? NULL : tensor(b, U_AS, F, g.one, g.one, 0, 0, "amax_s");
    cudnnBackendDescriptor_t ao = c->no_amax_o ? NULL : tensor(b, U_AO, F, g.one, g.one, 0, 0, "amax_o");

    cudnnBackendDescriptor_t s0 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "S");
    mm(b, q, kt, s0, "Q K^T");
    cudnnBackendDescriptor_t s1 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "S c");
    pw(b, CUDNN_POINTWISE_MUL, F, s0, sc, NULL, s1, -1, "S c");
    cudnnBackendDescriptor_t s2 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "S c dq");
    pw(b, CUDNN_POINTWISE_MUL, F, s1, dq, NULL, s2, -1, "S c dq");
    cudnnBackendDescriptor_t s3 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "S c dq dk");
    pw(b, CUDNN_POINTWISE_MUL, F, s2, dk, NULL, s3, -1, "S c dq dk");
    cudnnBackendDescriptor_t sm = s3;
    if (!c->nocausal) sm = causal(b, s3, ninf, g.ssd, g.sss);
    cudnnBackendDescriptor_t mx = tensor(b, -1, F, g.rd, g.rs, 1, 0, "max"), sub = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "S-m");
    cudnnBackendDescriptor_t ex = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "exp"), sum = tensor(b, -1, F, g.rd, g.rs, 1, 0, "sum");
    cudnnBackendDescriptor_t lg = tensor(b, -1, F, g.rd, g.rs, 1, 0, "log"), p = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "P");
    red(b, CUDNN_REDUCE_TENSOR_MAX, sm, mx, "max");
    pw(b, CUDNN_POINTWISE_SUB, F, sm, mx, NULL, sub, -1, "S - m");
    pw(b, CUDNN_POINTWISE_EXP, F, sub, NULL, NULL, ex, -1, "exp");
    red(b, CUDNN_REDUCE_TENSOR_ADD, ex, sum, "sum");
    pw(b, CUDNN_POINTWISE_LOG, F, sum, NULL, NULL, lg, -1, "log");
    pw(b, CUDNN_POINTWISE_ADD, F, mx, lg, NULL, st, -1, "Stats");
    pw(b, CUDNN_POINTWISE_DIV, F, ex, sum, NULL, p, -1, "P");
    if (as) red(b, CUDNN_REDUCE_TENSOR_AMAX, p, as, "amax_s");
    cudnnBackendDescriptor_t p8 = tensor(b, -1, E, g.ssd, g.sss, 1, 0, "P8");
    pw(b, CUDNN_POINTWISE_MUL, F, p, ss, NULL, p8, -1, "P scale_s");
    cudnnBackendDescriptor_t pv = tensor(b, -1, F, g.qd, g.acc, 1, 0, "P8 V8");
    mm(b, p8, v, pv, "P8 V8");
    cudnnBackendDescriptor_t o1 = tensor(b, -1, F, g.qd, g.acc, 1, 0, "O ds");
    pw(b, CUDNN_POINTWISE_MUL, F, pv, ds, NULL, o1, -1, "descale_s");
    if (!so) { /* no scale_o: descale_v writes O, amax_o reads it */
        pw(b, CUDNN_POINTWISE_MUL, F, o1, dv, NULL, o, -1, "descale_v into O");
        if (ao) red(b, CUDNN_REDUCE_TENSOR_AMAX, o, ao, "amax_o of O");
        return;
    }
    cudnnBackendDescriptor_t od = tensor(b, -1, F, g.qd, g.acc, 1, 0, "O");
    pw(b, CUDNN_POINTWISE_MUL, F, o1, dv, NULL, od, -1, "descale_v");
    pw(b, CUDNN_POINTWISE_MUL, F, od, so, NULL, o, -1, "scale_o");
    if (ao) red(b, CUDNN_REDUCE_TENSOR_AMAX, od, ao, "amax_o");
}

#include "fp8_sdpa_bwd.h" /* the backward of flag 'b' (after pcase and dims_of) */

/* ---- the reference -------------------------------------------------------- */

typedef struct refout {
    double *o_exact, *o_chain, *stats; /* o_chain: O rounded to O's type (O8 = e4m3(O·scale_o), decoded, · descale_o) */
    double amax_s, amax_o;
} refout;

/* qv, kv, vv: decoded code values in (B, S, nh, hd) order. */
static void reference(const pcase *c, const double *qv, const double *kv, const double *vv, double dqkv, double attn,
                      double scale_s, double scale_o, refout *r)
{
    const int64_t B = c->B, S = c->S, h = c->nh, d = c->hd, C = h * d, rows = B * h * S;
    double amax_s = 0, amax_o = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(max : amax_s, amax_o)
    for (int64_t row = 0; row < rows; row++) {
        const int64_t bi = row / (h * S), hi = (row / S) % h, i = row % S, n = c->nocausal ? S : i + 1;
        double *s = (double *)malloc((size_t)n * sizeof *s), m = -INFINITY, l = 0;
        const double *qr = qv + (bi * S + i) * C + hi * d;
        for (int64_t j = 0; j < n; j++) {
            const double *kr = kv + (bi * S + j) * C + hi * d;
            double dot = 0;
            for (int64_t e = 0; e < d; e++) dot += qr[e] * kr[e];
            s[j] = dot * attn * dqkv * dqkv;
            if (s[j] > m) m = s[j];
        }
        for (int64_t j = 0; j < n; j++) l += exp(s[j] - m);
        r->stats[row] = m + log(l);
        double *oe = r->o_exact + (bi * S + i) * C + hi * d, *oc = r->o_chain + (bi * S + i) * C + hi * d;
        for (int64_t e = 0; e < d; e++) oe[e] = oc[e] = 0;
        for (int64_t j = 0; j < n; j++) {
            const double pj = exp(s[j] - m) / l, p8 = e4m3_round(pj * scale_s) / scale_s;
            if (pj > amax_s) amax_s = pj;
            const double *vr = vv + (bi * S + j) * C + hi * d;
            for (int64_t e = 0; e < d; e++) oe[e] += pj * vr[e] * dqkv, oc[e] += p8 * vr[e] * dqkv;
        }
        for (int64_t e = 0; e < d; e++) {
            if (fabs(oc[e]) > amax_o) amax_o = fabs(oc[e]);
            oc[e] = o_round(c, oc[e], scale_o);
        }
        free(s);
    }
    r->amax_s = amax_s, r->amax_o = amax_o;
}

/* ---- judging a forward's outputs ----------------------------------------- */

typedef struct verdict {
    int fail;
    char text[384];
} verdict;

/* o: the (B·S, nh·gd) O in its type (O8 codes, or BF16/FP16); stats:
 * (B·nh, S); amx: amax_s, amax_o (each checked where the graph has it);
 * same: whether the executions agreed bitwise. The bounds of the note. */
static verdict judge(const pcase *c, const void *o, const float *stats, const float amx[2], const refout *rf,
                     double scale_o, int same)
{
    const int64_t S = c->S, nh = c->nh, d = c->hd, G = c->gd, n = c->B * S * nh * d, rows = c->B * nh * S;
    double *og = (double *)malloc(n * sizeof(double));
    int64_t unwritten = 0;
    for (int64_t i = 0; i < n; i++) { /* element (row, e) of the hd-wide rows, from the G-wide ones */
        og[i] = o_value(c, o, (i / d) * G + i % d) / scale_o;
        if (isnan(og[i])) unwritten++, og[i] = 0;
    }
    double ew, wr, ecw, ecr, stat_err = 0;
    int64_t at, cat;
    errs(og, rf->o_exact, n, d, &ew, &wr, &at);
    errs(rf->o_chain, rf->o_exact, n, d, &ecw, &ecr, &cat);
    for (int64_t i = 0; i < rows; i++) {
        const double e = isnan(stats[i]) ? INFINITY : fabs(stats[i] - rf->stats[i]) / (1 + fabs(rf->stats[i]));
        if (!(e <= stat_err)) stat_err = e;
    }
    const double ao_err = c->no_amax_o ? 0 : fabs(amx[1] - rf->amax_o) / rf->amax_o;
    const double as_err = c->no_amax_s ? 0 : fabs(amx[0] - rf->amax_s);
    const int64_t wb = at / (S * nh), ws = (at / nh) % S, wh = at % nh; /* the worst row: (b, s, h) */
    verdict v;
    v.fail = !(ew <= 1.25 * ecw + 0.01) || !(wr <= 2 * ecr + 0.05) || (!c->inference && !(stat_err <= 1e-3)) ||
             !(ao_err <= 0.1) || !(as_err <= 1e-3) || unwritten || !same;
    char as_t[64] = "amax_s -", ao_t[64] = "amax_o -";
    if (!c->no_amax_s) snprintf(as_t, sizeof as_t, "amax_s %.6f (ref %.6f)", amx[0], rf->amax_s);
    if (!c->no_amax_o) snprintf(ao_t, sizeof ao_t, "amax_o %.4f (ref %.4f)", amx[1], rf->amax_o);
    snprintf(v.text, sizeof v.text,
             "O err %.4f (chain %.4f) worst row %.3f (chain %.3f) at b%lld s%lld h%lld | Stats err %.2e | %s %s | "
             "unwritten %lld | runs bitwise %s",
             ew, ecw, wr, ecr, (long long)wb, (long long)ws, (long long)wh, c->inference ? 0.0 : stat_err, as_t, ao_t,
             (long long)unwritten, same ? "same" : "DIFFER");
    free(og);
    return v;
}

/* ---- running a case ------------------------------------------------------- */

static int run_case(cudnnHandle_t h, const pcase *c)
{
    const int64_t B = c->B, S = c->S, nh = c->nh, d = c->hd, C = nh * d, n = B * S * C, rows = B * nh * S;
    const int64_t G = c->gd, CG = nh * G, ng = B * S * CG; /* the graph's (padded) head_dim and sizes */
    plan pl;
    const clock_t t0 = clock();
    plan_start(&pl, h);
    build_graph(&pl.b, c);
    if (!plan_finish_ex(&pl, c->config, c->search)) {
        printf("%s: REFUSED %s\n", c->name, pl.b.err);
        char head[120];
        snprintf(head, sizeof head, "%.119s", pl.b.err);
        note(c, "NO ENGINE (%s%s)", head, strlen(pl.b.err) >= sizeof head ? "..." : "");
        plan_free(&pl);
        return 1;
    }
    const double build_s = (double)(clock() - t0) / CLOCKS_PER_SEC;

    /* inputs: N(0, amp²) quantized with one scale for Q, K, V (as f8's QKV slot) */
    double *x = (double *)malloc(3 * n * sizeof *x), amax = 0;
    for (int64_t i = 0; i < 3 * n; i++) x[i] = c->amp * rnd_normal(), amax = fmax(amax, fabs(x[i]));
    const double scale_qkv = 448.0 / amax, dqkv = 1.0 / scale_qkv;
    uint8_t *codes = (uint8_t *)malloc(3 * n); /* Q, K, V planes, each (B, S, nh, hd) */
    double *val = (double *)malloc(3 * n * sizeof *val);
#pragma omp parallel for
    for (int64_t i = 0; i < 3 * n; i++) codes[i] = e4m3_code(x[i] * scale_qkv), val[i] = e4m3_value(codes[i]);
    double vmax = 0;
    for (int64_t i = 2 * n; i < 3 * n; i++) vmax = fmax(vmax, fabs(val[i]) * dqkv);
    /* scale_o: 1 for O in BF16/FP16 (not quantized); for O8 448 over V's amax, or (q) the QKV scale */
    const float attn = (float)(1.0 / sqrt((double)d)), scale_s = 448.0f;
    const float scale_o = c->otype != O_E4M3 ? 1.0f : c->so_qkv ? (float)scale_qkv : (float)(448.0 / vmax);
    const float host_sc[6] = {(float)dqkv, (float)dqkv, (float)dqkv, scale_s, 1.0f / scale_s, scale_o};
    float scale_s_v = scale_s, scale_o_v = scale_o; /* the by-value forms' */
    const int64_t ob = o_bytes(c), onb = ng * ob; /* O's bytes */

    /* device buffers */
    uint8_t *dqkvb, *dout;
    float *dstats, *dsc, *damax;
    void *ws = NULL;
    CUDA(cudaMalloc((void **)&dqkvb, 3 * ng));
    CUDA(cudaMalloc((void **)&dout, onb));
    CUDA(cudaMalloc((void **)&dstats, rows * sizeof(float)));
    /* the scalars, then the two amaxes, each in its own 64 bytes; packed (flag f, as f8 placed them):
     * 16 bytes apart and one pointer for descale_q, _k and _v */
    const int sp = c->packed ? 16 : 64;
    CUDA(cudaMalloc((void **)&dsc, 8 * 64));
    damax = (float *)((char *)dsc + 6 * sp);
    if (pl.ws) CUDA(cudaMalloc(&ws, pl.ws));
    for (int i = 0; i < 6; i++) CUDA(cudaMemcpy((char *)dsc + sp * i, &host_sc[i], 4, cudaMemcpyHostToDevice));
    uint8_t *lay = (uint8_t *)calloc(3 * ng, 1); /* padding: code 0 = +0 */
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t hh = 0; hh < nh; hh++)
                for (int64_t e = 0; e < d; e++)
                    for (int t = 0; t < 3; t++) {
                        const uint8_t v = codes[t * n + ((bi * S + s) * nh + hh) * d + e];
                        if (c->separate) lay[t * ng + ((bi * nh + hh) * S + s) * G + e] = v;
                        else lay[(bi * S + s) * 3 * CG + t * CG + hh * G + e] = v;
                    }
    CUDA(cudaMemcpy(dqkvb, lay, 3 * ng, cudaMemcpyHostToDevice));
    void *pq = dqkvb, *pk = c->separate ? dqkvb + ng : dqkvb + CG, *pv = c->separate ? dqkvb + 2 * ng : dqkvb + 2 * CG;

    float attn_v = attn, ninf = c->flt_max ? -FLT_MAX : -INFINITY;
    int64_t uids[N_UID] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF, U_DQ, U_DK, U_DV, U_SS, U_DS, U_SO, U_AS, U_AO};
    void *ptrs[N_UID] = {pq, pk, pv, dout, dstats, &attn_v, &ninf, dsc, (char *)dsc + (c->packed ? 0 : sp),
                         (char *)dsc + (c->packed ? 0 : 2 * sp),
                         c->ss_byval ? (void *)&scale_s_v : (void *)((char *)dsc + 3 * sp), (char *)dsc + 4 * sp,
                         c->so_form == SO_BYVAL ? (void *)&scale_o_v : (void *)((char *)dsc + 5 * sp), damax,
                         (char *)damax + sp};
    int np = N_UID;
    if (c->inference) pack_drop(uids, ptrs, &np, U_STATS);
    if (c->nocausal) pack_drop(uids, ptrs, &np, U_NEG_INF);
    if (c->so_form == SO_NONE) pack_drop(uids, ptrs, &np, U_SO);
    if (c->no_amax_s) pack_drop(uids, ptrs, &np, U_AS);
    if (c->no_amax_o) pack_drop(uids, ptrs, &np, U_AO);
    cudnnBackendDescriptor_t vp;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, np, uids);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, np, ptrs);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    cudnnStatus_t st = cudnnBackendFinalize(vp);

    /* three executions; outputs NaN-filled before each, the amaxes 0, 1e30, 0 */
    const int R = 3;
    uint8_t *o8[3]; /* O as written: E4M3 codes or BF16/FP16 */
    float *stats[3], amx[3][2];
    int ran = 1;
    for (int r = 0; r < R && ran; r++) {
        const float pre[2] = {r == 1 ? 1e30f : 0.0f, r == 1 ? 1e30f : 0.0f};
        CUDA(cudaMemset(dout, ob == 1 ? 0x7f : 0xff, onb)); /* NaN: E4M3 0x7f, BF16/FP16 0xffff */
        CUDA(cudaMemset(dstats, 0xff, rows * sizeof(float)));
        CUDA(cudaMemcpy(damax, &pre[0], 4, cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy((char *)damax + sp, &pre[1], 4, cudaMemcpyHostToDevice));
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, pl.plan, vp);
        if (st != CUDNN_STATUS_SUCCESS) {
            char last[256] = "";
            cudnnGetLastErrorString(last, sizeof last);
            printf("%s: EXECUTE FAILED %s; %s\n", c->name, cudnnGetErrorString(st), last);
            note(c, "engine %lld (%s) EXECUTE FAILED %s", (long long)pl.engine, pl.how, cudnnGetErrorString(st));
            ran = 0;
            break;
        }
        CUDA(cudaDeviceSynchronize());
        o8[r] = (uint8_t *)malloc(onb);
        stats[r] = (float *)malloc(rows * sizeof(float));
        CUDA(cudaMemcpy(o8[r], dout, onb, cudaMemcpyDeviceToHost));
        CUDA(cudaMemcpy(stats[r], dstats, rows * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA(cudaMemcpy(&amx[r][0], damax, 4, cudaMemcpyDeviceToHost));
        CUDA(cudaMemcpy(&amx[r][1], (char *)damax + sp, 4, cudaMemcpyDeviceToHost));
    }
    float ms = 0;
    if (ran) { /* time it: 10 executions */
        cudaEvent_t e0, e1;
        CUDA(cudaEventCreate(&e0));
        CUDA(cudaEventCreate(&e1));
        CUDA(cudaEventRecord(e0, 0));
        for (int r = 0; r < 10; r++) cudnnBackendExecute(h, pl.plan, vp);
        CUDA(cudaEventRecord(e1, 0));
        CUDA(cudaEventSynchronize(e1));
        CUDA(cudaEventElapsedTime(&ms, e0, e1));
        ms /= 10;
    }
    cudnnBackendDestroyDescriptor(vp);

    int fail = !ran;
    if (ran) {
        refout rf;
        rf.o_exact = (double *)malloc(n * sizeof(double));
        rf.o_chain = (double *)malloc(n * sizeof(double));
        rf.stats = (double *)malloc(rows * sizeof(double));
        reference(c, val, val + n, val + 2 * n, dqkv, attn, scale_s, scale_o, &rf);
        int same = amx[2][0] == amx[0][0] && amx[2][1] == amx[0][1]; /* the amaxes of the runs that start at 0 */
        for (int r = 1; r < R; r++)
            same &= memcmp(o8[r], o8[0], onb) == 0 && memcmp(stats[r], stats[0], rows * sizeof(float)) == 0;
        const int amax_kept = (!c->no_amax_s && amx[1][0] >= 1e29f) || (!c->no_amax_o && amx[1][1] >= 1e29f);
        const verdict v = judge(c, o8[0], stats[0], amx[0], &rf, scale_o, same);
        fail = v.fail;
        printf("%s: %s | engine %lld cfg %lld/%lld via %s ws %lld build %.1fs exec %.3f ms | %s | amax prefilled 1e30 %s\n",
               c->name, fail ? "FAIL" : "ok", (long long)pl.engine, (long long)pl.cfg, (long long)pl.n_cfg, pl.how,
               (long long)pl.ws, build_s, ms, v.text, amax_kept ? "KEPT (cuDNN maxes into it)" : "overwritten");
        char vt[72];
        snprintf(vt, sizeof vt, "%.71s", v.text); /* "O err x (chain y) worst row ..." */
        note(c, "engine %lld (%s) %s %.3f ms | %s", (long long)pl.engine, pl.how, fail ? "FAIL" : "PASS", ms, vt);
        if (c->backward) { /* on the first execution's outputs (the timed ones may differ if it races) */
            CUDA(cudaMemcpy(dout, o8[0], ng, cudaMemcpyHostToDevice));
            CUDA(cudaMemcpy(dstats, stats[0], rows * sizeof(float), cudaMemcpyHostToDevice));
            const fwd_state f = {c, val, dqkv, attn, scale_s, scale_o, ninf, pq, pk, pv, dout, dstats, o8[0], stats[0]};
            fail |= run_backward(h, &f);
        }
        free(rf.o_exact), free(rf.o_chain), free(rf.stats);
        for (int r = 0; r < R; r++) free(o8[r]), free(stats[r]);
    }
    fflush(stdout);
    cudaFree(dqkvb), cudaFree(dout), cudaFree(dstats), cudaFree(dsc);
    if (ws) cudaFree(ws);
    free(x), free(codes), free(val), free(lay);
    plan_free(&pl);
    return fail;
}

/* The judge on planted outputs, no GPU needed (-selftest): the chain itself
 * passes; a row scaled 4.6x, a Stats off by 0.01, an unwritten value, a
 * run-to-run difference each fail, for O in E4M3 and (flags B, H) in
 * BF16/FP16 with the reference's O unquantized. For O in BF16/FP16 also:
 * the chain's error against "exact" is below the E4M3 chain's on the same
 * inputs (O rounded to 16 bits, not to E4M3). 0 if every expectation held. */
static int selftest(const char *arg)
{
    pcase c;
    if (!parse_case(arg, &c)) return printf("selftest: bad case %s\n", arg), 1;
    const int64_t nh = c.nh, d = c.hd, G = c.gd, n = c.B * c.S * nh * d, rows = c.B * nh * c.S, ng = c.B * c.S * nh * G;
    const int64_t ob = o_bytes(&c);
    double *val = (double *)malloc(3 * n * sizeof *val), amax = 0, vmax = 0;
    for (int64_t i = 0; i < 3 * n; i++) val[i] = c.amp * rnd_normal(), amax = fmax(amax, fabs(val[i]));
    for (int64_t i = 0; i < 3 * n; i++) val[i] = e4m3_round(val[i] * 448.0 / amax);
    const double dqkv = amax / 448.0;
    for (int64_t i = 2 * n; i < 3 * n; i++) vmax = fmax(vmax, fabs(val[i]) * dqkv);
    const double scale_o = c.otype != O_E4M3 ? 1.0 : c.so_qkv ? 448.0 / amax : 448.0 / vmax, attn = 1.0 / sqrt((double)d);
    refout rf;
    rf.o_exact = (double *)malloc(n * sizeof(double)), rf.o_chain = (double *)malloc(n * sizeof(double));
    rf.stats = (double *)malloc(rows * sizeof(double));
    reference(&c, val, val + n, val + 2 * n, dqkv, attn, 448.0, scale_o, &rf);
    uint8_t *o8 = (uint8_t *)calloc(ng, ob);
    float *st = (float *)malloc(rows * sizeof(float)), amx[2] = {(float)rf.amax_s, (float)rf.amax_o};
    for (int64_t i = 0; i < n; i++) o_store(&c, o8, (i / d) * G + i % d, rf.o_chain[i] * scale_o);
    for (int64_t i = 0; i < rows; i++) st[i] = (float)rf.stats[i];
    int wrong = 0;
    const int64_t row = (n / d) / 3; /* some row in the middle */
    for (int t = 0; t < 5; t++) {
        uint8_t *o = (uint8_t *)malloc(ng * ob);
        float *sv = (float *)malloc(rows * sizeof(float));
        memcpy(o, o8, ng * ob), memcpy(sv, st, rows * sizeof(float));
        if (t == 1)
            for (int64_t e = 0; e < d; e++) o_store(&c, o, row * G + e, 4.6 * o_value(&c, o8, row * G + e));
        if (t == 2) sv[rows / 2] += 0.01f * (1 + fabsf(sv[rows / 2]));
        if (t == 3) o_store(&c, o, row * G, NAN);
        const verdict v = judge(&c, o, sv, amx, &rf, scale_o, t != 4);
        const int expect_fail = t != 0;
        printf("selftest %s, %s: %s (%s)\n", c.name,
               t == 0 ? "the chain" : t == 1 ? "a row x4.6" : t == 2 ? "a Stats off" : t == 3 ? "an unwritten value" : "runs differ",
               v.fail == expect_fail ? "as expected" : "WRONG", v.text);
        wrong += v.fail != expect_fail;
        free(o), free(sv);
    }
    if (c.otype != O_E4M3) { /* the same inputs with O quantized to E4M3 at 448/amax(V) */
        pcase c8 = c;
        c8.otype = O_E4M3;
        refout r8 = rf;
        r8.o_chain = (double *)malloc(n * sizeof(double));
        r8.o_exact = (double *)malloc(n * sizeof(double));
        r8.stats = (double *)malloc(rows * sizeof(double));
        reference(&c8, val, val + n, val + 2 * n, dqkv, attn, 448.0, 448.0 / vmax, &r8);
        double e16, e8, w;
        int64_t at;
        errs(rf.o_chain, rf.o_exact, n, d, &e16, &w, &at);
        errs(r8.o_chain, r8.o_exact, n, d, &e8, &w, &at);
        const int ok = e16 < e8 && e16 > 0;
        printf("selftest %s, the chain unquantized: %s (O err %.5f against the E4M3-O chain's %.5f)\n", c.name,
               ok ? "as expected" : "WRONG", e16, e8);
        wrong += !ok;
        free(r8.o_chain), free(r8.o_exact), free(r8.stats);
    }
    free(val), free(rf.o_exact), free(rf.o_chain), free(rf.stats), free(o8), free(st);
    return wrong;
}

/* Every finite E4M3, BF16 and FP16 code round-trips through the host
 * helpers (value, then code); 0 if so. */
static int formats_check(void)
{
    int bad8 = 0, bad16 = 0;
    for (int cde = 0; cde < 256; cde++)
        if ((cde & 0x7f) != 0x7f && cde != 0x80 && e4m3_code(e4m3_value((uint8_t)cde)) != cde) bad8++;
    for (uint32_t u = 0; u < 65536; u++) {
        const double b = bf16_value((uint16_t)u), h = fp16_value((uint16_t)u);
        if (!isnan(b) && (bf16_code(b) != u || bf16_round(b) != b)) bad16++;
        if (!isnan(h) && (fp16_code(h) != u || fp16_round(h) != h)) bad16++;
    }
    /* rounding: ties to even, and the last binade's edge */
    const int r = bf16_round(1.0 + ldexp(1.0, -8)) != 1.0 || bf16_round(1.0 + 3 * ldexp(1.0, -8)) != 1.0 + ldexp(1.0, -6) ||
                  fp16_round(1.0 + ldexp(1.0, -11)) != 1.0 || fp16_round(65519.0) != 65504.0 || !isinf(fp16_round(65520.0)) ||
                  fp16_round(ldexp(3.0, -26)) != ldexp(1.0, -24) || fp16_code(-0.0) != 0x8000;
    printf("selftest formats: %s (E4M3 codes not round-tripping %d, BF16/FP16 %d, rounding cases %s)\n",
           bad8 || bad16 || r ? "WRONG" : "as expected", bad8, bad16, r ? "WRONG" : "right");
    return bad8 + bad16 + r;
}

int main(int argc, char **argv)
{
    double budget = 1e9;
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "-t") == 0) budget = atof(argv[2]), first = 3;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "-selftest") == 0) {
        const int wrong = formats_check() + selftest("2,64,2,64") + selftest("2,256,3,64:p") + selftest("1,128,2,128:n") +
                          selftest("2,64,2,64:q") + selftest("2,64,2,64:B") + selftest("2,64,2,64:BxAS") +
                          selftest("1,128,2,128:nH") + selftest("2,256,3,64:pBd");
        printf("selftest: %s\n", wrong ? "WRONG" : "ok");
        return wrong ? 1 : 0;
    }
    if (argc > 1 && strcmp(argv[1], "-graphs") == 0) { /* each case's tensors and operations, no handle, no GPU */
        int bad_ = 0;
        for (int i = 2; i < argc; i++) {
            pcase c;
            bld b;
            memset(&b, 0, sizeof b);
            b.next_uid = 100;
            if (!parse_case(argv[i], &c)) {
                printf("bad case '%s'\n", argv[i]);
                bad_++;
                continue;
            }
            build_graph(&b, &c);
            printf("graph %s: %d operations, %d descriptors: %s\n", c.name, b.n_ops, b.n_all, b.err[0] ? b.err : "built");
            bad_ += b.err[0] != 0;
            for (int k = b.n_all - 1; k >= 0; k--) cudnnBackendDestroyDescriptor(b.all[k]);
        }
        return bad_ ? 1 : 0;
    }
    /* self-check of the E4M3 helpers: every finite code round-trips */
    for (int cde = 0; cde < 256; cde++)
        if ((cde & 0x7f) != 0x7f && cde != 0x80 && e4m3_code(e4m3_value((uint8_t)cde)) != cde) {
            printf("E4M3 helper broken at code %d\n", cde);
            return 2;
        }
    cudnnHandle_t h;
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
        printf("cudnnCreate failed\n");
        return 2;
    }
    cudaDeviceProp prop;
    CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("cuDNN %zu (built against %d), %s, %d SMs\n", cudnnGetVersion(), CUDNN_VERSION, prop.name,
           prop.multiProcessorCount);
    const time_t start = time(NULL);
    int failed = 0, run = 0;
    for (int i = first; i < argc; i++) {
        if (difftime(time(NULL), start) > budget) {
            printf("time budget spent: %d cases not run\n", argc - i);
            break;
        }
        pcase c;
        if (!parse_case(argv[i], &c)) {
            printf("bad case '%s'\n", argv[i]);
            continue;
        }
        failed += run_case(h, &c);
        run++;
    }
    printf("%d cases, %d failed or refused\n", run, failed);
    if (n_summary > 1) { /* the table: one short line a case */
        printf("summary, cuDNN %zu on %s: shape, form, result\n", cudnnGetVersion(), prop.name);
        for (int i = 0; i < n_summary; i++) printf("  cuDNN %zu | %s\n", cudnnGetVersion(), summary[i]);
    }
    cudnnDestroy(h);
    return failed ? 1 : 0;
}
