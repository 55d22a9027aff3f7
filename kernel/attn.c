//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* attn.c: fused scaled dot-product attention (IDK_OP_ATTENTION), one C step instead of a
 * scores product, a softmax and a product with V. Each work item is one batch-head and a
 * block of ATT_QB query rows: the block's scores go to a small per-thread buffer, get their
 * row softmax there and are multiplied by V, so the L x S scores never reach memory. K and
 * V are packed once per batch-head a thread meets (K transposed to d x S, V to S x dv,
 * both padded to 16 floats a row). Every output row is computed by one thread in a fixed
 * order (dot products over d in order, the softmax's sums in 16 lanes reduced the same way,
 * the products with V over S in order), so the bytes depend neither on the thread count nor
 * on scheduling. ops.c dispatches this kind here. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define T(i) (&p->t[op->in[i]])
#define OUT (&p->t[op->out[0]])

#define ATT_QB 16 /* query rows a work item */
#define ATT_R 4   /* query rows a register tile */

/* s->extra: these sizes and strides (in floats), then for each batch-head the offsets of
 * its Q, Kt, V, Y and mask */
enum { A_L, A_S, A_D, A_DV, A_QR, A_QC, A_KD, A_KS, A_VS, A_VD, A_YR, A_YC, A_MR, A_MC, A_NP };

static idk_status_t abad(idk_plan_t *p, const char *what) {
    return idk_fail(p, IDK_ERR_INVALID, "op %d (attention): %s", p->nops - 1, what);
}

static int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* per-thread workspace: Kp (D x Sp), Vp (S x DVp), Q block (QB x D), scores (QB x Sp), output block (QB x DVp) */
static int64_t ws_floats(const int64_t *a) {
    int64_t Sp = up16(a[A_S]), DVp = up16(a[A_DV]);
    return a[A_D] * Sp + a[A_S] * DVp + ATT_QB * a[A_D] + ATT_QB * Sp + ATT_QB * DVp;
}

/* ---- AVX-512 ---- */

/* exp512 is ops_modern.c's soft_exp on 16 lanes (fused multiply-adds, the power of 2 by
 * scalef): below -80, exactly 0. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 exp512(__m512 x) {
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-80.0f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-80.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 q = _mm512_set1_ps(1.0f / 720);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 120));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 24));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 6));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.5f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, q, n);
}

/* qk_tile: sc[r][16 NV columns] = scale * sum over c of q[r][c] kp[c][...], R rows. */
static inline __attribute__((always_inline, target("avx512f"))) void
qk_tile(const float *const *q, int64_t D, const float *kp, int64_t Sp, float *sc, float scale, const int R, const int NV) {
    __m512 acc[ATT_R][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NV; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < D; c++) {
        __m512 kv[4];
        for (int j = 0; j < NV; j++) kv[j] = _mm512_load_ps(kp + c * Sp + 16 * j);
        for (int r = 0; r < R; r++) {
            __m512 b = _mm512_set1_ps(q[r][c]);
            for (int j = 0; j < NV; j++) acc[r][j] = _mm512_fmadd_ps(b, kv[j], acc[r][j]);
        }
    }
    __m512 sv = _mm512_set1_ps(scale);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NV; j++) _mm512_store_ps(sc + r * Sp + 16 * j, _mm512_mul_ps(acc[r][j], sv));
}

/* pv_tile: o[r][16 NV columns] = inv[r] * sum over s < S of pr[r][s] v[s][...] (v's rows
 * vs apart), R rows. */
static inline __attribute__((always_inline, target("avx512f"))) void
pv_tile(const float *pr, int64_t Sp, const float *v, int64_t vs, int64_t S, const float *inv, float *const *o, int64_t col,
        const int R, const int NV) {
    __m512 acc[ATT_R][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NV; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t s = 0; s < S; s++) {
        __m512 vv[4];
        for (int j = 0; j < NV; j++) vv[j] = _mm512_loadu_ps(v + s * vs + 16 * j);
        for (int r = 0; r < R; r++) {
            __m512 b = _mm512_set1_ps(pr[r * Sp + s]);
            for (int j = 0; j < NV; j++) acc[r][j] = _mm512_fmadd_ps(b, vv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NV; j++) _mm512_storeu_ps(o[r] + col + 16 * j, _mm512_mul_ps(acc[r][j], _mm512_set1_ps(inv[r])));
}

/* TILE calls fn(..., R, NV) with R rows (1 to ATT_R) and NV vectors (1 to 4) as constants. */
#define TILE_NV(fn, R, nv, ...)                                                                                        \
    switch (nv) {                                                                                                      \
    case 1: fn(__VA_ARGS__, R, 1); break;                                                                              \
    case 2: fn(__VA_ARGS__, R, 2); break;                                                                              \
    case 3: fn(__VA_ARGS__, R, 3); break;                                                                              \
    default: fn(__VA_ARGS__, R, 4); break;                                                                             \
    }
#define TILE(fn, r, nv, ...)                                                                                           \
    switch (r) {                                                                                                       \
    case 1: TILE_NV(fn, 1, nv, __VA_ARGS__) break;                                                                     \
    case 2: TILE_NV(fn, 2, nv, __VA_ARGS__) break;                                                                     \
    case 3: TILE_NV(fn, 3, nv, __VA_ARGS__) break;                                                                     \
    default: TILE_NV(fn, 4, nv, __VA_ARGS__) break;                                                                    \
    }

/* softmax_rows512: row r of sc (S scores, mask added) becomes its exps (max subtracted);
 * inv[r] = 1 / their sum. */
static inline __attribute__((always_inline, target("avx512f"))) void
softmax_row512(float *x, int64_t S, const float *m, int64_t mc, float *inv) {
    if (m) {
        if (mc == 1) {
            for (int64_t s = 0; s < S; s++) x[s] += m[s];
        } else {
            for (int64_t s = 0; s < S; s++) x[s] += m[s * mc];
        }
    }
    int64_t full = S & ~(int64_t)15;
    __mmask16 tm = (__mmask16)((1u << (S - full)) - 1);
    __m512 mx = _mm512_set1_ps(-__builtin_inff());
    for (int64_t s = 0; s < full; s += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(x + s));
    if (tm) mx = _mm512_mask_max_ps(mx, tm, mx, _mm512_load_ps(x + full));
    __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t s = 0; s < full; s += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_load_ps(x + s), mv));
        _mm512_store_ps(x + s, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (tm) {
        __m512 e = _mm512_maskz_mov_ps(tm, exp512(_mm512_sub_ps(_mm512_load_ps(x + full), mv)));
        _mm512_store_ps(x + full, e);
        sum = _mm512_add_ps(sum, e);
    }
    *inv = 1.0f / _mm512_reduce_add_ps(sum);
}

/* block512 computes output rows [i0, i0 + nr) of one batch-head from packed kp and v (vp
 * packed, or V itself when its rows are contiguous and a multiple of 16 long). */
static __attribute__((target("avx512f"))) void block512(const int64_t *a, const float *q, const float *kp,
                                                       const float *v, int64_t vs, const float *mask, float *y,
                                                       int64_t i0, int nr, float scale, float *qb, float *sc,
                                                       float *ob) {
    int64_t S = a[A_S], D = a[A_D], DV = a[A_DV], Sp = up16(S), DVp = up16(DV);
    int nvk = (int)(Sp / 16), nvv = (int)(DVp / 16);
    /* the block's rows of Q, of the output: in place, or through qb and ob */
    const float *qr[ATT_QB];
    float *orow[ATT_QB];
    int ydirect = a[A_YC] == 1 && DV % 16 == 0;
    for (int r = 0; r < nr; r++) {
        qr[r] = q + (i0 + r) * a[A_QR];
        if (a[A_QC] != 1) {
            for (int64_t c = 0; c < D; c++) qb[r * D + c] = qr[r][c * a[A_QC]];
            qr[r] = qb + r * D;
        }
        orow[r] = ydirect ? y + (i0 + r) * a[A_YR] : ob + r * DVp;
    }
    /* a panel of 64 columns of kp stays in L1 while every row tile reads it */
    for (int j = 0; j < nvk; j += 4)
        for (int r = 0; r < nr; r += ATT_R)
            TILE(qk_tile, nr - r, nvk - j, qr + r, D, kp + 16 * j, Sp, sc + r * Sp + 16 * j, scale)
    float inv[ATT_QB];
    for (int r = 0; r < nr; r++)
        softmax_row512(sc + r * Sp, S, mask ? mask + (i0 + r) * a[A_MR] : NULL, a[A_MC], &inv[r]);
    for (int r = 0; r < nr; r += ATT_R)
        for (int j = 0; j < nvv; j += 4)
            TILE(pv_tile, nr - r, nvv - j, sc + r * Sp, Sp, v + 16 * j, vs, S, inv + r, orow + r, 16 * j)
    if (!ydirect)
        for (int r = 0; r < nr; r++) {
            float *yr = y + (i0 + r) * a[A_YR];
            for (int64_t c = 0; c < DV; c++) yr[c * a[A_YC]] = ob[r * DVp + c];
        }
}

/* ---- without AVX-512: the same steps, one row at a time ---- */

static void block_generic(const int64_t *a, const float *q, const float *kp, const float *vp, const float *mask,
                          float *y, int64_t i0, int nr, float scale, float *sc, float *ob) {
    int64_t S = a[A_S], D = a[A_D], DV = a[A_DV], Sp = up16(S), DVp = up16(DV);
    for (int r = 0; r < nr; r++) {
        const float *qr = q + (i0 + r) * a[A_QR];
        const float *mr = mask ? mask + (i0 + r) * a[A_MR] : NULL;
        float mx = -__builtin_inff();
        for (int64_t s = 0; s < S; s++) {
            float acc = 0;
            for (int64_t c = 0; c < D; c++) acc += qr[c * a[A_QC]] * kp[c * Sp + s];
            sc[s] = acc * scale + (mr ? mr[s * a[A_MC]] : 0.0f);
            if (sc[s] > mx) mx = sc[s];
        }
        float sum = 0;
        for (int64_t s = 0; s < S; s++) {
            float x = sc[s] - mx;
            sc[s] = x < -80.0f ? 0.0f : expf(x);
            sum += sc[s];
        }
        for (int64_t c = 0; c < DV; c++) ob[c] = 0;
        for (int64_t s = 0; s < S; s++)
            for (int64_t c = 0; c < DV; c++) ob[c] += sc[s] * vp[s * DVp + c];
        float *yr = y + (i0 + r) * a[A_YR];
        for (int64_t c = 0; c < DV; c++) yr[c * a[A_YC]] = ob[c] / sum;
    }
}

/* pack_k512: pack_kv's kp where kd is 1 (K's rows contiguous: 16 keys gathered at a time) */
static __attribute__((target("avx512f"))) void pack_k512(const int64_t *a, const float *k, float *kp) {
    int64_t S = a[A_S], D = a[A_D], Sp = up16(S), ks = a[A_KS];
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                     _mm512_set1_epi32((int)ks));
    for (int64_t s = 0; s < Sp; s += 16) {
        __mmask16 m = S - s >= 16 ? 0xffff : (__mmask16)((1u << (S - s)) - 1);
        const float *kr = k + s * ks;
        for (int64_t c = 0; c < D; c++)
            _mm512_store_ps(kp + c * Sp + s, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, kr + c, 4));
    }
}

/* pack_kv: kp[c][s] = Kt[c][s] and vp[s][c] = V[s][c], zero-padded to 16 floats a row. */
static void pack_kv(const int64_t *a, const float *k, const float *v, float *kp, float *vp, int gather, int vdirect) {
    int64_t S = a[A_S], D = a[A_D], DV = a[A_DV], Sp = up16(S), DVp = up16(DV);
    int64_t kd = a[A_KD], ks = a[A_KS], vs = a[A_VS], vd = a[A_VD];
    if (gather)
        pack_k512(a, k, kp);
    else if (kd == 1)
        for (int64_t s = 0; s < S; s++) {
            const float *kr = k + s * ks;
            float *o = kp + s;
            for (int64_t c = 0; c < D; c++) o[c * Sp] = kr[c];
        }
    else
        for (int64_t c = 0; c < D; c++)
            for (int64_t s = 0; s < S; s++) kp[c * Sp + s] = k[c * kd + s * ks];
    if (!gather)
        for (int64_t c = 0; c < D; c++) memset(kp + c * Sp + S, 0, (size_t)(Sp - S) * sizeof(float));
    for (int64_t s = 0; s < S && !vdirect; s++) {
        float *vr = vp + s * DVp;
        if (vd == 1)
            memcpy(vr, v + s * vs, (size_t)DV * sizeof(float));
        else
            for (int64_t c = 0; c < DV; c++) vr[c] = v[s * vs + c * vd];
        for (int64_t c = DV; c < DVp; c++) vr[c] = 0;
    }
}

static idk_status_t fn_attention(idk_plan_t *p, idk_step_t *s) {
    const float *q = idk_buf_ptr(p, s->bufs[0]), *k = idk_buf_ptr(p, s->bufs[1]), *v = idk_buf_ptr(p, s->bufs[2]);
    float *y = idk_buf_ptr(p, s->bufs[3]);
    const float *mask = s->nb > 4 ? idk_buf_ptr(p, s->bufs[4]) : NULL;
    const int64_t *a = s->extra, *off = s->extra + A_NP;
    int64_t nb = s->n1, L = a[A_L], nblk = (L + ATT_QB - 1) / ATT_QB, items = nb * nblk;
    int64_t wsz = (ws_floats(a) + 15) & ~(int64_t)15;
    int nth = s->one_thread ? 1 : p->threads;
    if (nth > items) nth = (int)items;
    if (nth < 1) return IDK_OK;
    float *ws = aligned_alloc(64, (size_t)(nth * wsz) * sizeof(float));
    if (!ws) return idk_fail(p, IDK_ERR_NOMEM, "attention: no memory for its %d workspaces", nth);
    int avx512 = !s->alg;
    /* gathered K: its rows contiguous and their offsets fit the gather's 32-bit indices */
    int gather = avx512 && a[A_KD] == 1 && a[A_KS] * 15 < INT32_MAX;
    /* V read in place: its rows contiguous, whole vectors */
    int vdirect = avx512 && a[A_VD] == 1 && a[A_DV] % 16 == 0;
    float scale = s->fv;
    int64_t Sp = up16(a[A_S]), DVp = up16(a[A_DV]);
#pragma omp parallel num_threads(nth)
    {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        float *kp = ws + t * wsz, *vp = kp + a[A_D] * Sp, *qb = vp + a[A_S] * DVp, *sc = qb + ATT_QB * a[A_D],
              *ob = sc + ATT_QB * Sp;
        int64_t cur = -1;
        for (int64_t it = items * t / n; it < items * (t + 1) / n; it++) {
            int64_t b = it / nblk, i0 = (it % nblk) * ATT_QB;
            const int64_t *o = off + 5 * b;
            if (b != cur) {
                pack_kv(a, k + o[1], v + o[2], kp, vp, gather, vdirect);
                cur = b;
            }
            int nr = (int)(L - i0 < ATT_QB ? L - i0 : ATT_QB);
            const float *mb = mask ? mask + o[4] : NULL;
            if (avx512)
                block512(a, q + o[0], kp, vdirect ? v + o[2] : vp, vdirect ? a[A_VS] : DVp, mb, y + o[3], i0, nr, scale,
                         qb, sc, ob);
            else
                block_generic(a, q + o[0], kp, vp, mb, y + o[3], i0, nr, scale, sc, ob);
        }
    }
    free(ws);
    return IDK_OK;
}

/* logical_strides: the strides (in floats) of tensor x's row-major storage at logical dims
 * i (x's stored dim perm[i]); dims gets the logical dims. */
static void logical_strides(const idk_tensor_t *x, const int64_t *perm, int64_t *dims, int64_t *st) {
    int64_t rs[IDK_MAX_DIMS], acc = 1;
    for (int i = x->ndims - 1; i >= 0; i--) {
        rs[i] = acc;
        acc *= x->dims[i];
    }
    for (int i = 0; i < x->ndims; i++) {
        dims[i] = x->dims[perm[i]];
        st[i] = rs[perm[i]];
    }
}

idk_status_t idk_check_attention(idk_plan_t *p, const idk_op_t *op) {
    if ((op->nin != 3 && op->nin != 4) || op->nout != 1 || op->nf != 1) return abad(p, "takes q, kt, v, [mask]; y; scale");
    const idk_tensor_t *o = OUT;
    int r = o->ndims;
    if (r < 2 || r > IDK_MAX_DIMS || op->ni != 4 * r) return abad(p, "rank, or not 4 permutations of it");
    for (int i = 0; i < op->nin; i++)
        if (T(i)->ndims != r || T(i)->dtype != IDK_F32) return abad(p, "inputs: f32 of the output's rank");
    if (o->dtype != IDK_F32) return abad(p, "output: f32");
    int64_t dims[4][IDK_MAX_DIMS], st[IDK_MAX_DIMS];
    for (int k = 0; k < 4; k++) {
        int seen[IDK_MAX_DIMS] = {0};
        for (int i = 0; i < r; i++) {
            int64_t v = op->ia[k * r + i];
            if (v < 0 || v >= r || seen[v]++) return abad(p, "bad permutation");
        }
        if (k < 3) logical_strides(T(k), op->ia + k * r, dims[k], st);
    }
    for (int j = 0; j < r; j++) dims[3][op->ia[3 * r + j]] = o->dims[j];
    int64_t L = dims[0][r - 2], D = dims[0][r - 1], S = dims[1][r - 1];
    if (dims[1][r - 2] != D || dims[2][r - 2] != S || dims[3][r - 2] != L || dims[3][r - 1] != dims[2][r - 1])
        return abad(p, "inner dims: want q (L, d), kt (d, S), v (S, dv), y (L, dv)");
    if (S < 1 || D < 1) return abad(p, "empty keys or depth");
    for (int i = 0; i < r - 2; i++)
        if (dims[1][i] != dims[0][i] || dims[2][i] != dims[0][i] || dims[3][i] != dims[0][i])
            return abad(p, "batch dims differ");
    if (op->nin == 4)
        for (int i = 0; i < r; i++) {
            int64_t want = i == r - 1 ? S : dims[0][i];
            if (T(3)->dims[i] != 1 && T(3)->dims[i] != want) return abad(p, "mask does not broadcast to (…, L, S)");
        }
    return IDK_OK;
}

idk_status_t idk_lower_attention(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *o = OUT;
    int r = o->ndims, nin = op->nin;
    int64_t dims[5][IDK_MAX_DIMS], st[5][IDK_MAX_DIMS];
    for (int k = 0; k < 3; k++) logical_strides(T(k), op->ia + k * r, dims[k], st[k]);
    /* y: product dim ia[3r + j] is y's stored dim j */
    int64_t acc = 1;
    for (int j = r - 1; j >= 0; j--) {
        dims[3][op->ia[3 * r + j]] = o->dims[j];
        st[3][op->ia[3 * r + j]] = acc;
        acc *= o->dims[j];
    }
    if (nin == 4) { /* the mask, row-major, broadcast dims of stride 0 */
        acc = 1;
        for (int i = r - 1; i >= 0; i--) {
            st[4][i] = T(3)->dims[i] == 1 ? 0 : acc;
            acc *= T(3)->dims[i];
        }
    } else
        memset(st[4], 0, sizeof st[4]);
    int b[5];
    for (int i = 0; i < nin && i < 3; i++)
        if (idk_get_plain(p, op->in[i], &b[i]) != 0) return IDK_ERR_DNNL;
    if (nin == 4 && idk_get_plain(p, op->in[3], &b[4]) != 0) return IDK_ERR_DNNL;
    if ((b[3] = idk_new_buffer(p, o->nbytes)) < 0 || idk_set_output(p, op->out[0], NULL, 1, b[3]) != 0)
        return IDK_ERR_NOMEM;
    idk_step_t *s = idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    int64_t nb = 1;
    for (int i = 0; i < r - 2; i++) nb *= dims[0][i];
    s->extra = calloc((size_t)(A_NP + 5 * nb), sizeof(int64_t));
    if (!s->extra) return IDK_ERR_NOMEM;
    int64_t *a = s->extra;
    a[A_L] = dims[0][r - 2];
    a[A_D] = dims[0][r - 1];
    a[A_S] = dims[1][r - 1];
    a[A_DV] = dims[2][r - 1];
    a[A_QR] = st[0][r - 2], a[A_QC] = st[0][r - 1];
    a[A_KD] = st[1][r - 2], a[A_KS] = st[1][r - 1];
    a[A_VS] = st[2][r - 2], a[A_VD] = st[2][r - 1];
    a[A_YR] = st[3][r - 2], a[A_YC] = st[3][r - 1];
    a[A_MR] = st[4][r - 2], a[A_MC] = st[4][r - 1];
    for (int64_t bi = 0; bi < nb; bi++) {
        int64_t rem = bi;
        int64_t *off = a + A_NP + 5 * bi;
        for (int i = r - 3; i >= 0; i--) {
            int64_t x = rem % dims[0][i];
            rem /= dims[0][i];
            for (int k = 0; k < 5; k++) off[k] += x * st[k][i];
        }
    }
    s->fn = fn_attention;
    s->nb = nin == 4 ? 5 : 4;
    memcpy(s->bufs, b, sizeof b);
    s->n1 = nb;
    s->fv = op->fa[0];
    /* alg 1: the plain-C blocks, on a CPU without AVX-512 or with IDK_ATTN_AVX512=0 (how the
     * tests reach them on this one) */
    s->alg = !__builtin_cpu_supports("avx512f") || env_off("IDK_ATTN_AVX512");
    return IDK_OK;
}
