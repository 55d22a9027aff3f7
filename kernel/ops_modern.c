//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* ops_modern.c: TopK, Resize and the masked softmax of fused attention (C loops). ops.c dispatches these kinds here. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define T(i) (&p->t[op->in[i]])
#define OUT (&p->t[op->out[0]])

static idk_status_t mbad(idk_plan_t *p, const char *what) {
    return idk_fail(p, IDK_ERR_INVALID, "op %d (kind %d): %s", p->nops - 1, p->ops[p->nops - 1].kind, what);
}

/* plain_out gives tensor tid a new plain buffer. */
static int plain_out(idk_plan_t *p, int tid) {
    int b = idk_new_buffer(p, p->t[tid].nbytes);
    if (b < 0) return -1;
    if (idk_set_output(p, tid, NULL, 1, b) != 0) return -1;
    return b;
}

static int64_t vol(const idk_tensor_t *t) { return (int64_t)idk_tensor_volume(t); }

/* ---- TopK ---- */

typedef struct {
    float v;
    int64_t i;
} topk_pair_t;

static int topk_desc(const void *a, const void *b) {
    const topk_pair_t *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int topk_asc(const void *a, const void *b) {
    const topk_pair_t *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* n1 outer, n2 len, n3 inner, d[0] k, alg largest. bufs: x, values, indices. */
static idk_status_t fn_topk(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]);
    float *ov = idk_buf_ptr(p, s->bufs[1]);
    int64_t *oi = idk_buf_ptr(p, s->bufs[2]);
    int64_t outer = s->n1, len = s->n2, inner = s->n3, k = s->d[0];
    if (k == 0 || outer * inner == 0) return IDK_OK;
    topk_pair_t *buf = malloc((size_t)len * sizeof *buf);
    if (!buf) return idk_fail(p, IDK_ERR_NOMEM, "topk: %lld values", (long long)len);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            const float *v = x + a * len * inner + c;
            for (int64_t j = 0; j < len; j++) {
                buf[j].v = v[j * inner];
                buf[j].i = j;
            }
            qsort(buf, (size_t)len, sizeof *buf, s->alg ? topk_desc : topk_asc);
            for (int64_t j = 0; j < k; j++) {
                int64_t at = (a * k + j) * inner + c;
                ov[at] = buf[j].v;
                oi[at] = buf[j].i;
            }
        }
    free(buf);
    return IDK_OK;
}

static idk_status_t check_topk(idk_plan_t *p, const idk_op_t *op) {
    if (op->nin != 1 || op->nout != 2 || op->ni != 3) return mbad(p, "topk takes x, axis, k, largest; writes values, indices");
    const idk_tensor_t *x = T(0), *v = OUT, *ix = &p->t[op->out[1]];
    int64_t ax = op->ia[0], k = op->ia[1];
    if (x->dtype != IDK_F32 || v->dtype != IDK_F32 || ix->dtype != IDK_I64 || ax < 0 || ax >= x->ndims || k < 0 ||
        k > x->dims[ax] || v->ndims != x->ndims || ix->ndims != x->ndims)
        return mbad(p, "topk types/axis/k");
    for (int i = 0; i < x->ndims; i++) {
        int64_t want = i == ax ? k : x->dims[i];
        if (v->dims[i] != want || ix->dims[i] != want) return mbad(p, "topk output dims");
    }
    return IDK_OK;
}

static idk_status_t lower_topk(idk_plan_t *p, const idk_op_t *op) {
    int sb, vb, ib;
    if (idk_get_plain(p, op->in[0], &sb) != 0) return IDK_ERR_DNNL;
    if ((vb = plain_out(p, op->out[0])) < 0 || (ib = plain_out(p, op->out[1])) < 0) return IDK_ERR_NOMEM;
    idk_step_t *s = idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    const idk_tensor_t *x = T(0);
    int ax = (int)op->ia[0];
    s->fn = fn_topk;
    s->nb = 3;
    s->bufs[0] = sb;
    s->bufs[1] = vb;
    s->bufs[2] = ib;
    s->n1 = 1;
    s->n3 = 1;
    for (int i = 0; i < ax; i++) s->n1 *= x->dims[i];
    for (int i = ax + 1; i < x->ndims; i++) s->n3 *= x->dims[i];
    s->n2 = x->dims[ax];
    s->d[0] = op->ia[1];
    s->alg = op->ia[2] != 0;
    return IDK_OK;
}

/* ---- Resize ----
 * The caller computed, per dim, taps[d] source indices and weights for each output index
 * (constant tensors); the loop sums, per output element, the product of the dims' weights
 * over every combination of taps. d[]: taps per dim, sa[]: x's strides, sb[]: offset of
 * each dim's table, extra: the output dims. */
static idk_status_t fn_resize(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]);
    float *y = idk_buf_ptr(p, s->bufs[1]);
    const int64_t *idx = idk_buf_ptr(p, s->bufs[2]);
    const float *w = idk_buf_ptr(p, s->bufs[3]);
    int r = s->nd;
    int64_t out[IDK_MAX_DIMS], taps[IDK_MAX_DIMS], tab[IDK_MAX_DIMS];
    int64_t combos = 1;
    for (int i = 0; i < r; i++) {
        taps[i] = s->d[i];
        tab[i] = s->sb[i];
        combos *= taps[i];
        out[i] = 0;
    }
    const int64_t *dims = s->extra;
    for (int64_t e = 0; e < s->n1; e++) {
        int extrap = 0;
        for (int i = 0; i < r; i++)
            if (idx[tab[i] + out[i] * taps[i]] < 0) extrap = 1;
        float acc = 0;
        if (extrap) {
            acc = s->fv;
        } else {
            for (int64_t c = 0; c < combos; c++) {
                int64_t rem = c, off = 0;
                float wt = 1;
                for (int i = r - 1; i >= 0; i--) {
                    int64_t t = rem % taps[i];
                    rem /= taps[i];
                    int64_t at = tab[i] + out[i] * taps[i] + t;
                    off += idx[at] * s->sa[i];
                    wt *= w[at];
                }
                if (wt != 0) acc += wt * x[off];
            }
        }
        y[e] = acc;
        for (int i = r - 1; i >= 0; i--) {
            if (++out[i] < dims[i]) break;
            out[i] = 0;
        }
    }
    return IDK_OK;
}

static idk_status_t check_resize(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *y = OUT;
    int r = x->ndims;
    if (op->nin != 3 || op->nout != 1 || x->dtype != IDK_F32 || y->dtype != IDK_F32 || y->ndims != r || r < 1 ||
        op->ni != r || op->nf != 1)
        return mbad(p, "resize takes f32 x, indices, weights; taps[rank]; extrapolation value");
    const idk_tensor_t *ix = T(1), *w = T(2);
    int64_t need = 0;
    for (int i = 0; i < r; i++) {
        if (op->ia[i] < 1 || op->ia[i] > 4) return mbad(p, "resize taps");
        need += y->dims[i] * op->ia[i];
    }
    if (ix->dtype != IDK_I64 || w->dtype != IDK_F32 || vol(ix) != need || vol(w) != need || !ix->cdata)
        return mbad(p, "resize tables: constant i64 indices and f32 weights, one per output index and tap");
    const int64_t *v = ix->cdata;
    for (int i = 0, at = 0; i < r; i++)
        for (int64_t j = 0; j < y->dims[i] * op->ia[i]; j++, at++)
            if (v[at] < -1 || v[at] >= x->dims[i] || (v[at] < 0 && j % op->ia[i] != 0))
                return mbad(p, "resize index out of range");
    return IDK_OK;
}

static idk_status_t lower_resize(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *y = OUT;
    int r = x->ndims;
    int sb, ib, wb, db;
    if (idk_get_plain(p, op->in[0], &sb) != 0 || idk_get_plain(p, op->in[1], &ib) != 0 ||
        idk_get_plain(p, op->in[2], &wb) != 0)
        return IDK_ERR_DNNL;
    if ((db = plain_out(p, op->out[0])) < 0) return IDK_ERR_NOMEM;
    idk_step_t *s = idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->extra = calloc((size_t)r, sizeof(int64_t));
    if (!s->extra) return IDK_ERR_NOMEM;
    for (int i = 0; i < r; i++) s->extra[i] = y->dims[i];
    s->fn = fn_resize;
    s->nb = 4;
    s->bufs[0] = sb;
    s->bufs[1] = db;
    s->bufs[2] = ib;
    s->bufs[3] = wb;
    s->nd = r;
    s->fv = op->fa[0];
    s->n1 = vol(y);
    int64_t st = 1, tab = 0;
    for (int i = r - 1; i >= 0; i--) {
        s->sa[i] = st;
        st *= x->dims[i];
    }
    for (int i = 0; i < r; i++) {
        s->d[i] = op->ia[i];
        s->sb[i] = tab;
        tab += y->dims[i] * op->ia[i];
    }
    return IDK_OK;
}

/* ---- masked softmax (the middle of fused attention) ----
 * y = softmax over the last axis of (x + mask), one pass per row. x and y (nb, L, S) as
 * rows of S; the mask broadcasts to x through strides: extra holds each batch's mask
 * offset (nb values), then the mask's row and column strides. n1 = nb, n2 = L, n3 = S. */

/* soft_exp is exp(x) for x <= 0 (x - max), branch-free so the loops vectorise; relative
 * error about 2e-7 (degree-6 Taylor on |r| <= ln2/2 after the 2^n split). Below -80 it
 * is exactly 0 (masked positions): never a denormal, which would slow later products. */
static inline float soft_exp(float x) {
    float z = x < -80.0f ? 0.0f : 1.0f;
    x = x < -80.0f ? -80.0f : x;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int32_t e = ((int32_t)n + 127) << 23;
    float sc;
    memcpy(&sc, &e, sizeof sc);
    return p * sc * z;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) static void
softmax_row(const float *restrict x, const float *restrict mr, int64_t mstep, float *restrict y, int64_t S) {
    if (mr && mstep == 1) {
#pragma omp simd
        for (int64_t j = 0; j < S; j++) y[j] = x[j] + mr[j];
    } else {
        float c = mr ? mr[0] : 0.0f;
#pragma omp simd
        for (int64_t j = 0; j < S; j++) y[j] = x[j] + c;
    }
    float m = y[0];
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < S; j++) m = y[j] > m ? y[j] : m;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < S; j++) {
        y[j] = soft_exp(y[j] - m);
        sum += y[j];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < S; j++) y[j] *= inv;
}

static idk_status_t fn_masked_softmax(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]), *mask = idk_buf_ptr(p, s->bufs[1]);
    float *y = idk_buf_ptr(p, s->bufs[2]);
    int64_t nb = s->n1, L = s->n2, S = s->n3;
    const int64_t *mbase = s->extra;
    int64_t mrow = s->extra[nb], mcol = s->extra[nb + 1];
    int64_t rows = nb * L;
#pragma omp parallel for num_threads(p->threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / L, i = r % L;
        softmax_row(x + r * S, mask + mbase[b] + i * mrow, mcol, y + r * S, S);
    }
    return IDK_OK;
}

static idk_status_t check_masked_softmax(idk_plan_t *p, const idk_op_t *op) {
    if (op->nin != 2 || op->nout != 1 || op->ni != 0 || op->nf != 0) return mbad(p, "masked softmax takes x, mask");
    const idk_tensor_t *x = T(0), *m = T(1), *o = OUT;
    int r = x->ndims;
    if (r < 2 || m->ndims != r || o->ndims != r || x->dtype != IDK_F32 || m->dtype != IDK_F32 || o->dtype != IDK_F32)
        return mbad(p, "masked softmax ranks/types");
    for (int i = 0; i < r; i++)
        if (o->dims[i] != x->dims[i] || (m->dims[i] != 1 && m->dims[i] != x->dims[i]))
            return mbad(p, "masked softmax dims");
    if (x->dims[r - 1] < 1) return mbad(p, "masked softmax of an empty axis");
    return IDK_OK;
}

static idk_status_t lower_masked_softmax(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *m = T(1);
    int r = x->ndims;
    int b[3];
    if (idk_get_plain(p, op->in[0], &b[0]) != 0 || idk_get_plain(p, op->in[1], &b[1]) != 0) return IDK_ERR_DNNL;
    if ((b[2] = plain_out(p, op->out[0])) < 0) return IDK_ERR_NOMEM;
    idk_step_t *s = idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    int64_t nb = 1;
    for (int i = 0; i < r - 2; i++) nb *= x->dims[i];
    s->extra = calloc((size_t)(nb + 2), sizeof(int64_t));
    if (!s->extra) return IDK_ERR_NOMEM;
    int64_t st[IDK_MAX_DIMS], acc = 1;
    for (int i = r - 1; i >= 0; i--) {
        st[i] = m->dims[i] == 1 ? 0 : acc;
        acc *= m->dims[i];
    }
    for (int64_t bi = 0; bi < nb; bi++) {
        int64_t rem = bi, off = 0;
        for (int i = r - 3; i >= 0; i--) {
            off += (rem % x->dims[i]) * st[i];
            rem /= x->dims[i];
        }
        s->extra[bi] = off;
    }
    s->extra[nb] = st[r - 2];
    s->extra[nb + 1] = st[r - 1];
    s->fn = fn_masked_softmax;
    s->nb = 3;
    memcpy(s->bufs, b, sizeof b);
    s->n1 = nb;
    s->n2 = x->dims[r - 2];
    s->n3 = x->dims[r - 1];
    return IDK_OK;
}

idk_status_t idk_check_modern(idk_plan_t *p, const idk_op_t *op) {
    switch (op->kind) {
    case IDK_OP_TOPK: return check_topk(p, op);
    case IDK_OP_RESIZE: return check_resize(p, op);
    case IDK_OP_MASKED_SOFTMAX: return check_masked_softmax(p, op);
    }
    return mbad(p, "unknown op kind");
}

idk_status_t idk_lower_modern(idk_plan_t *p, const idk_op_t *op) {
    switch (op->kind) {
    case IDK_OP_TOPK: return lower_topk(p, op);
    case IDK_OP_RESIZE: return lower_resize(p, op);
    case IDK_OP_MASKED_SOFTMAX: return lower_masked_softmax(p, op);
    }
    return idk_fail(p, IDK_ERR_INVALID, "unknown kind %d", op->kind);
}
