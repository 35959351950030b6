/*
 * dev/cuda/fp8_sdpa_bwd.h — cuDNN's FP8 attention backward (TE's
 * NVTE_FP8_DPA_BWD=1 form), for fp8_sdpa_probe.cu's flag 'b': the design of
 * docs/FP8_ATTENTION.md ("The FP8 backward, designed") as a graph, run
 * after the case's forward on its outputs (O8 and Stats), and held to an
 * FP64 reference. Included by fp8_sdpa_probe.cu after pcase and
 * dims_of. dO and dS are E4M3 here (TE's HYBRID would take E5M2).
 *
 * The graph, as cudnn-frontend's sdpa_fp8_bwd.h expands it with
 * per-tensor scales:
 *   D  = reduce_d(dO8 ⊙ O8) · descale_dO · descale_O             [b,h,s,1]
 *   P  = exp(mask(Q8·K8ᵀ · c · descale_q · descale_k) - Stats)
 *   dV = (P·scale_s → E4M3)ᵀ · dO8 · descale_s · descale_dO;  amax_dV; · scale_dV → dV8
 *   dS = (dO8·V8ᵀ · descale_dO · descale_v - D) · P · c;       amax_dP; · scale_dP → dS8
 *   dQ = dS8 · K8 · descale_dP · descale_k;                       amax_dQ; · scale_dQ → dQ8
 *   dK = dS8ᵀ · Q8 · descale_dP · descale_q;                      amax_dK; · scale_dK → dK8
 * The reference: "exact" keeps P and dS unquantized, "chain" rounds
 * P·scale_s and dS·scale_dP to E4M3 and each output through its scale; the
 * scales are 448 over the exact amaxes. Both take the GPU forward's O8 and
 * Stats as their inputs, as the graph does.
 */
#ifndef F8_DEV_FP8_SDPA_BWD_H
#define F8_DEV_FP8_SDPA_BWD_H

/* What the forward leaves for the backward. */
typedef struct fwd_state {
    const pcase *c;
    const double *val;        /* Q, K, V code values: 3 planes of (B, S, nh, hd) */
    double dqkv, attn, scale_s, scale_o;
    float ninf;
    void *pq, *pk, *pv;       /* device codes in the case's layout (head_dim gd) */
    void *o8;                 /* device O8 (B·S, nh·gd) */
    float *stats;             /* device Stats */
    const uint8_t *o8_host;   /* the same, on the host */
    const float *stats_host;
} fwd_state;

enum {
    B_Q = 1, B_K, B_V, B_O, B_DO, B_STATS, B_DQ, B_DK, B_DV, B_ATTN, B_NEG_INF, B_DSQ, B_DSK, B_DSV, B_DSO, B_DSDO,
    B_DSS, B_DSDP, B_SS, B_SDP, B_SDQ, B_SDK, B_SDV, B_ADQ, B_ADK, B_ADV, B_ADP, B_NUID = 27
};
#define BWD_SCALARS 12 /* descale q k v o dO s dP, scale s dP dQ dK dV: uids B_DSQ.. B_SDV */

/* y = x · t into a new FP32 virtual of (dim, str). */
static cudnnBackendDescriptor_t mulv(bld *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t t, const int64_t *dim,
                                     const int64_t *str, const char *what)
{
    cudnnBackendDescriptor_t y = tensor(b, -1, CUDNN_DATA_FLOAT, dim, str, 1, 0, what);
    pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, x, t, NULL, y, -1, what);
    return y;
}

/* The matmul_fp8 pattern: c = a·bb · da · db; out = c · sc (FP8 real); amax = AMAX(c). */
static void mm_fp8(bld *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t da,
                   cudnnBackendDescriptor_t db, cudnnBackendDescriptor_t sc, cudnnBackendDescriptor_t out,
                   cudnnBackendDescriptor_t amax, const int64_t *dim, const int64_t *acc, const char *what)
{
    cudnnBackendDescriptor_t c0 = tensor(b, -1, CUDNN_DATA_FLOAT, dim, acc, 1, 0, what);
    mm(b, a, bb, c0, what);
    cudnnBackendDescriptor_t c2 = mulv(b, mulv(b, c0, da, dim, acc, what), db, dim, acc, what);
    pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, c2, sc, NULL, out, -1, what);
    red(b, CUDNN_REDUCE_TENSOR_AMAX, c2, amax, what);
}

static void build_bwd_graph(bld *b, const pcase *c)
{
    gdims g;
    dims_of(c, &g);
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, E = CUDNN_DATA_FP8_E4M3;

    cudnnBackendDescriptor_t q = tensor(b, B_Q, E, g.qd, g.qs, 0, 0, "Q"), kt = tensor(b, B_K, E, g.ktd, g.kts, 0, 0, "K^T");
    cudnnBackendDescriptor_t vt = tensor(b, B_V, E, g.ktd, g.kts, 0, 0, "V^T"), o = tensor(b, B_O, E, g.qd, g.os, 0, 0, "O8");
    cudnnBackendDescriptor_t dO = tensor(b, B_DO, E, g.qd, g.os, 0, 0, "dO8");
    cudnnBackendDescriptor_t st = tensor(b, B_STATS, F, g.rd, g.rs, 0, 0, "Stats");
    cudnnBackendDescriptor_t dq = tensor(b, B_DQ, E, g.qd, g.qs, 0, 0, "dQ8"), dk = tensor(b, B_DK, E, g.qd, g.qs, 0, 0, "dK8");
    cudnnBackendDescriptor_t dv = tensor(b, B_DV, E, g.qd, g.qs, 0, 0, "dV8");
    cudnnBackendDescriptor_t attn = tensor(b, B_ATTN, F, g.one, g.one, 0, 1, "attn_scale");
    cudnnBackendDescriptor_t ninf = tensor(b, B_NEG_INF, F, g.one, g.one, 0, 1, "mask value");
    cudnnBackendDescriptor_t sc[BWD_SCALARS], am[4];
    static const char *const sc_name[BWD_SCALARS] = {"descale_q", "descale_k", "descale_v", "descale_o", "descale_dO",
                                                     "descale_s", "descale_dP", "scale_s", "scale_dP", "scale_dQ",
                                                     "scale_dK", "scale_dV"};
    for (int i = 0; i < BWD_SCALARS; i++) sc[i] = tensor(b, B_DSQ + i, F, g.one, g.one, 0, 0, sc_name[i]);
    for (int i = 0; i < 4; i++) am[i] = tensor(b, B_ADQ + i, F, g.one, g.one, 0, 0, "amax");
    cudnnBackendDescriptor_t dsq = sc[0], dsk = sc[1], dsv = sc[2], dso = sc[3], dsdo = sc[4], dss = sc[5], dsdp = sc[6];
    cudnnBackendDescriptor_t ss = sc[7], sdp = sc[8], sdq = sc[9], sdk = sc[10], sdv = sc[11];

    /* D */
    cudnnBackendDescriptor_t t = tensor(b, -1, F, g.qd, g.dot, 1, 0, "dO O");
    pw(b, CUDNN_POINTWISE_MUL, F, dO, o, NULL, t, -1, "dO O");
    cudnnBackendDescriptor_t r = tensor(b, -1, F, g.rd, g.rs, 1, 0, "sum dO O");
    red(b, CUDNN_REDUCE_TENSOR_ADD, t, r, "sum dO O");
    cudnnBackendDescriptor_t D = mulv(b, mulv(b, r, dsdo, g.rd, g.rs, "D dO"), dso, g.rd, g.rs, "D");

    /* P from Stats */
    cudnnBackendDescriptor_t s0 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "S");
    mm(b, q, kt, s0, "Q K^T");
    cudnnBackendDescriptor_t s3 = mulv(b, mulv(b, mulv(b, s0, attn, g.ssd, g.sss, "S c"), dsq, g.ssd, g.sss, "S dq"), dsk, g.ssd, g.sss, "S dk");
    cudnnBackendDescriptor_t sm = c->nocausal ? s3 : causal(b, s3, ninf, g.ssd, g.sss);
    cudnnBackendDescriptor_t s4 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "S - Stats"), p = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "P");
    pw(b, CUDNN_POINTWISE_SUB, F, sm, st, NULL, s4, -1, "S - Stats");
    pw(b, CUDNN_POINTWISE_EXP, F, s4, NULL, NULL, p, -1, "P");

    /* dV = P8ᵀ dO8 */
    cudnnBackendDescriptor_t p8 = tensor(b, -1, E, g.ssd, g.sss, 1, 0, "P8"), p8t = tensor(b, -1, E, g.ssd, g.sst, 1, 0, "P8^T");
    pw(b, CUDNN_POINTWISE_MUL, F, p, ss, NULL, p8, -1, "P scale_s");
    reshape(b, p8, p8t, "P8^T");
    mm_fp8(b, p8t, dO, dss, dsdo, sdv, dv, am[2], g.qd, g.acc, "dV");

    /* dS */
    cudnnBackendDescriptor_t dp0 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "dP");
    mm(b, dO, vt, dp0, "dO V^T");
    cudnnBackendDescriptor_t dp2 = mulv(b, mulv(b, dp0, dsdo, g.ssd, g.sss, "dP ddo"), dsv, g.ssd, g.sss, "dP dv");
    cudnnBackendDescriptor_t dp3 = tensor(b, -1, F, g.ssd, g.sss, 1, 0, "dP - D");
    pw(b, CUDNN_POINTWISE_SUB, F, dp2, D, NULL, dp3, -1, "dP - D");
    cudnnBackendDescriptor_t dS = mulv(b, mulv(b, dp3, p, g.ssd, g.sss, "(dP - D) P"), attn, g.ssd, g.sss, "dS");
    red(b, CUDNN_REDUCE_TENSOR_AMAX, dS, am[3], "amax_dP");
    cudnnBackendDescriptor_t ds8 = tensor(b, -1, E, g.ssd, g.sss, 1, 0, "dS8"), ds8t = tensor(b, -1, E, g.ssd, g.sst, 1, 0, "dS8^T");
    pw(b, CUDNN_POINTWISE_MUL, F, dS, sdp, NULL, ds8, -1, "dS scale_dP");

    /* dQ = dS8 K8; dK = dS8ᵀ Q8 */
    cudnnBackendDescriptor_t kk = tensor(b, -1, E, g.qd, g.qs, 1, 0, "K");
    reshape(b, kt, kk, "K");
    mm_fp8(b, ds8, kk, dsdp, dsk, sdq, dq, am[0], g.qd, g.acc, "dQ");
    reshape(b, ds8, ds8t, "dS8^T");
    mm_fp8(b, ds8t, q, dsdp, dsq, sdk, dk, am[1], g.qd, g.acc, "dK");
}

/* The FP64 backward of one head (b, h): dq, dk, dv rows of (B·S, nh·hd) at
 * the head's columns. chain: P and dS rounded as the graph's P8 and dS8.
 * Returns max |dS| (exact or chain) via *amax_ds. */
static void bwd_head(const fwd_state *f, const double *dov, double sdo_inv, const double *sc, int chain, int64_t bh,
                     double *dq, double *dk, double *dv, double *amax_ds)
{
    const pcase *c = f->c;
    const int64_t S = c->S, nh = c->nh, d = c->hd, C = nh * d, G = c->gd, bi = bh / nh, hi = bh % nh;
    const double *qv = f->val, *kv = f->val + c->B * S * C, *vv = f->val + 2 * c->B * S * C;
    const double scale_s = sc[7], scale_dp = sc[8];
    double *D = (double *)malloc((size_t)S * sizeof *D), amax = 0;
    for (int64_t i = 0; i < S; i++) {
        double acc = 0;
        for (int64_t e = 0; e < d; e++)
            acc += dov[(bi * S + i) * C + hi * d + e] * sdo_inv *
                   e4m3_value(f->o8_host[((bi * S + i) * nh + hi) * G + e]) / f->scale_o;
        D[i] = acc;
    }
    for (int64_t i = 0; i < S; i++) {
        const int64_t row = (bi * S + i) * C + hi * d;
        const double st = f->stats_host[bh * S + i];
        for (int64_t j = 0; j < (c->nocausal ? S : i + 1); j++) {
            const int64_t col = (bi * S + j) * C + hi * d;
            double s = 0, dp = 0;
            for (int64_t e = 0; e < d; e++) s += qv[row + e] * kv[col + e], dp += dov[row + e] * vv[col + e];
            s *= f->dqkv * f->dqkv * f->attn, dp *= sdo_inv * f->dqkv;
            const double p = exp(s - st), ds = (dp - D[i]) * p * f->attn;
            if (fabs(ds) > amax) amax = fabs(ds);
            const double pq = chain ? e4m3_round(p * scale_s) / scale_s : p;
            const double dsq = chain ? e4m3_round(ds * scale_dp) / scale_dp : ds;
            for (int64_t e = 0; e < d; e++) {
                dv[col + e] += pq * dov[row + e] * sdo_inv;
                dq[row + e] += dsq * kv[col + e] * f->dqkv;
                dk[col + e] += dsq * qv[row + e] * f->dqkv;
            }
        }
    }
    *amax_ds = amax;
    free(D);
}

/* Both passes over every head; out[0..2] = dq, dk, dv (zeroed here). */
static void bwd_reference(const fwd_state *f, const double *dov, double sdo_inv, const double *sc, int chain,
                          double *out[3], double *amax_ds)
{
    const pcase *c = f->c;
    const int64_t n = c->B * c->S * c->nh * c->hd;
    for (int i = 0; i < 3; i++) memset(out[i], 0, (size_t)n * sizeof(double));
    double amax = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(max : amax)
    for (int64_t bh = 0; bh < c->B * c->nh; bh++) { /* each head owns its columns of every row */
        double a = 0;
        bwd_head(f, dov, sdo_inv, sc, chain, bh, out[0], out[1], out[2], &a);
        if (a > amax) amax = a;
    }
    *amax_ds = amax;
}

static double amax_of(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* The backward of case f->c on its forward's outputs; prints one line; 1 if it failed. */
static int run_backward(cudnnHandle_t h, const fwd_state *f)
{
    const pcase *c = f->c;
    const int64_t B = c->B, S = c->S, nh = c->nh, d = c->hd, C = nh * d, n = B * S * C, G = c->gd, ng = B * S * nh * G;
    plan pl;
    plan_start(&pl, h);
    build_bwd_graph(&pl.b, c);
    if (!plan_finish(&pl, -1)) {
        printf("  backward: REFUSED %s\n", pl.b.err);
        plan_free(&pl);
        return 1;
    }
    /* dO: N(0, 1) as E4M3 codes with their own scale */
    double *dov = (double *)malloc(n * sizeof *dov), am = 0;
    for (int64_t i = 0; i < n; i++) dov[i] = rnd_normal(), am = fmax(am, fabs(dov[i]));
    const double sdo = 448.0 / am;
    uint8_t *do8 = (uint8_t *)calloc(ng, 1);
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        const uint8_t code = e4m3_code(dov[i] * sdo);
        dov[i] = e4m3_value(code); /* from here on: the code's value (times 1/sdo when used) */
        do8[(i / d) * G + i % d] = code;
    }
    /* scales: S and the inputs as the forward; dP, dQ, dK, dV 448 over the exact pass's amaxes */
    double sc[BWD_SCALARS] = {f->dqkv, f->dqkv, f->dqkv, 1.0 / f->scale_o, 1.0 / sdo, 1.0 / f->scale_s, 1.0,
                              f->scale_s, 1.0, 1.0, 1.0, 1.0};
    double *ex[3], *ch[3], amax_ds, amax_ds_chain;
    for (int i = 0; i < 3; i++) ex[i] = (double *)malloc(n * sizeof(double)), ch[i] = (double *)malloc(n * sizeof(double));
    bwd_reference(f, dov, 1.0 / sdo, sc, 0, ex, &amax_ds);
    sc[8] = 448.0 / amax_ds, sc[6] = 1.0 / sc[8];
    for (int i = 0; i < 3; i++) sc[9 + i] = 448.0 / amax_of(ex[i], n);
    bwd_reference(f, dov, 1.0 / sdo, sc, 1, ch, &amax_ds_chain);
    for (int i = 0; i < 3; i++)
        for (int64_t k = 0; k < n; k++) ch[i][k] = e4m3_round(ch[i][k] * sc[9 + i]) / sc[9 + i];

    /* device: dO8, the dQKV codes (the case's layout), scalars, amaxes */
    uint8_t *ddo, *dg;
    float *dsc, *dam;
    void *ws = NULL;
    const int64_t qkv_bytes = 3 * ng; /* either layout: 3 planes or rows of (B·S·nh·G) */
    CUDA(cudaMalloc((void **)&ddo, ng));
    CUDA(cudaMalloc((void **)&dg, qkv_bytes));
    CUDA(cudaMalloc((void **)&dsc, BWD_SCALARS * 64));
    CUDA(cudaMalloc((void **)&dam, 4 * 64));
    if (pl.ws) CUDA(cudaMalloc(&ws, pl.ws));
    CUDA(cudaMemcpy(ddo, do8, ng, cudaMemcpyHostToDevice));
    for (int i = 0; i < BWD_SCALARS; i++) {
        const float v = (float)sc[i];
        CUDA(cudaMemcpy((char *)dsc + 64 * i, &v, 4, cudaMemcpyHostToDevice));
    }
    const int64_t CG = nh * G;
    void *gq = dg, *gk = c->separate ? dg + ng : dg + CG, *gv = c->separate ? dg + 2 * ng : dg + 2 * CG;
    float attn = (float)f->attn, ninf = f->ninf;
    int64_t uids[B_NUID];
    void *ptrs[B_NUID] = {f->pq, f->pk, f->pv, f->o8, ddo, f->stats, gq, gk, gv, &attn, &ninf};
    for (int i = 0; i < B_NUID; i++) uids[i] = i + 1;
    for (int i = 0; i < BWD_SCALARS; i++) ptrs[B_DSQ - 1 + i] = (char *)dsc + 64 * i;
    for (int i = 0; i < 4; i++) ptrs[B_ADQ - 1 + i] = (char *)dam + 64 * i;
    int np = B_NUID;
    if (c->nocausal) pack_drop(uids, ptrs, &np, B_NEG_INF);
    cudnnBackendDescriptor_t vp;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, np, uids);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, np, ptrs);
    cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    cudnnStatus_t st = cudnnBackendFinalize(vp);
    uint8_t *got[2];
    float amx[2][4];
    int ran = 1;
    for (int r = 0; r < 2 && ran; r++) {
        CUDA(cudaMemset(dg, 0x7f, qkv_bytes));
        CUDA(cudaMemset(dam, 0, 4 * 64));
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, pl.plan, vp);
        if (st != CUDNN_STATUS_SUCCESS) {
            char last[256] = "";
            cudnnGetLastErrorString(last, sizeof last);
            printf("  backward: EXECUTE FAILED %s; %s\n", cudnnGetErrorString(st), last);
            ran = 0;
            break;
        }
        CUDA(cudaDeviceSynchronize());
        got[r] = (uint8_t *)malloc(qkv_bytes);
        CUDA(cudaMemcpy(got[r], dg, qkv_bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 4; i++) CUDA(cudaMemcpy(&amx[r][i], (char *)dam + 64 * i, 4, cudaMemcpyDeviceToHost));
    }
    cudnnBackendDestroyDescriptor(vp);
    int fail = !ran;
    if (ran) {
        static const char *const nm[3] = {"dQ", "dK", "dV"};
        const int same = memcmp(got[0], got[1], qkv_bytes) == 0 && memcmp(amx[0], amx[1], sizeof amx[0]) == 0;
        printf("  backward: engine %lld cfg %lld/%lld ws %lld | 2 runs bitwise %s | amax_dP %.4g (exact %.4g)", (long long)pl.engine,
               (long long)pl.cfg, (long long)pl.n_cfg, (long long)pl.ws, same ? "same" : "differ", amx[0][3], amax_ds);
        fail = !(fabs(amx[0][3] - amax_ds) <= 0.1 * amax_ds);
        double *g = (double *)malloc(n * sizeof(double));
        for (int t = 0; t < 3; t++) {
            int64_t unwritten = 0;
            for (int64_t i = 0; i < n; i++) { /* element (row, e) of plane t, from the layout's G-wide rows */
                const int64_t row = i / d, e = i % d, bs = row / nh, hh = row % nh;
                const int64_t at = c->separate ? t * ng + ((bs / S * nh + hh) * S + bs % S) * G + e
                                               : bs * 3 * CG + t * CG + hh * G + e;
                g[i] = e4m3_value(got[0][at]) / sc[9 + t];
                if (isnan(g[i])) unwritten++, g[i] = 0;
            }
            double ew, wr, ecw, ecr;
            int64_t wat, cat;
            errs(g, ex[t], n, d, &ew, &wr, &wat);
            errs(ch[t], ex[t], n, d, &ecw, &ecr, &cat);
            const double ref_amax = amax_of(ex[t], n), ae = fabs(amx[0][t] - ref_amax) / ref_amax;
            const int bad_t = !(ew <= 1.25 * ecw + 0.02) || !(wr <= 2 * ecr + 0.1) || !(ae <= 0.1) || unwritten;
            /* where the worst row is: (batch, query position, head), and its size against the tensor's rms */
            double rn = 0, tn = 0;
            for (int64_t e = 0; wat >= 0 && e < d; e++) rn += ex[t][wat * d + e] * ex[t][wat * d + e];
            for (int64_t i = 0; i < n; i++) tn += ex[t][i] * ex[t][i];
            printf(" | %s %s err %.4f (chain %.4f) worst row %.3f (chain %.3f) at b%lld s%lld h%lld (norm %.3g of rms row %.3g)"
                   " amax %.4g (exact %.4g)%s",
                   nm[t], bad_t ? "FAIL" : "ok", ew, ecw, wr, ecr, (long long)(wat / nh / S), (long long)(wat / nh % S),
                   (long long)(wat % nh), sqrt(rn), sqrt(tn * d / n), amx[0][t], ref_amax, unwritten ? " UNWRITTEN" : "");
            fail |= bad_t;
        }
        printf(" | %s\n", fail ? "FAIL" : "ok");
        free(g);
        for (int r = 0; r < 2; r++) free(got[r]);
    }
    fflush(stdout);
    cudaFree(ddo), cudaFree(dg), cudaFree(dsc), cudaFree(dam);
    if (ws) cudaFree(ws);
    for (int i = 0; i < 3; i++) free(ex[i]), free(ch[i]);
    free(dov), free(do8);
    plan_free(&pl);
    return fail;
}

#endif /* F8_DEV_FP8_SDPA_BWD_H */
