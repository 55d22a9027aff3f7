//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* quant.c: the int8 ops. QUANTIZE and DEQUANTIZE are ONNX's QuantizeLinear and
 * DequantizeLinear as C loops (the reference path: quantized values are carried as int64
 * like every integer); QCONV is a convolution run by oneDNN's u8/s8 x s8 VNNI kernels:
 * it quantizes its float input to 8 bits (a oneDNN reorder with the input's scale and zero
 * point), convolves with constant s8 weights into s32 and writes float, scaled per output
 * channel, with the usual post-ops; QMATMUL is the same for a matrix product by constant int8
 * weights (oneDNN's int8 matmul). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define T(i) (&p->t[op->in[i]])
#define OUT (&p->t[op->out[0]])

static idk_status_t qbad(idk_plan_t *p, const char *what) {
    return idk_fail(p, IDK_ERR_INVALID, "op %d (kind %d): %s", p->nops - 1, p->ops[p->nops - 1].kind, what);
}

static int same_shape(const idk_tensor_t *a, const idk_tensor_t *b) {
    if (a->ndims != b->ndims) return 0;
    for (int i = 0; i < a->ndims; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

/* params_fit: a scale or zero-point tensor is a scalar (1 value) or 1-D with x's dim at axis. */
static int params_fit(const idk_tensor_t *x, const idk_tensor_t *s, int64_t axis) {
    size_t v = idk_tensor_volume(s);
    if (v == 1 && s->ndims <= 1) return 1;
    return s->ndims == 1 && axis >= 0 && axis < x->ndims && s->dims[0] == x->dims[axis];
}

idk_status_t idk_check_quant(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *o = OUT;
    switch (op->kind) {
    case IDK_OP_QUANTIZE:
    case IDK_OP_DEQUANTIZE: {
        int q = op->kind == IDK_OP_QUANTIZE;
        if (op->nin < 2 || op->nin > 3 || op->nout != 1 || op->ni != (q ? 3 : 1))
            return qbad(p, "quantize/dequantize take x, scale, [zero_point] and i: axis[, qmin, qmax]");
        const idk_tensor_t *x = T(0);
        if (x->dtype != (q ? IDK_F32 : IDK_I64) || o->dtype != (q ? IDK_I64 : IDK_F32) || !same_shape(x, o))
            return qbad(p, q ? "quantize maps f32 to i64 of the same dims" : "dequantize maps i64 to f32 of the same dims");
        int64_t axis = op->ia[0];
        if (T(1)->dtype != IDK_F32 || !params_fit(x, T(1), axis)) return qbad(p, "scale must be f32, a scalar or 1-D along axis");
        if (op->nin == 3 && (T(2)->dtype != IDK_I64 || idk_tensor_volume(T(2)) != idk_tensor_volume(T(1))))
            return qbad(p, "zero_point must be i64 with the scale's dims");
        if (q && op->ia[1] > op->ia[2]) return qbad(p, "qmin > qmax");
        return IDK_OK;
    }
    case IDK_OP_QCONV: {
        if (op->nin < 3 || op->nin > 4 || op->nout != 1 || o->dtype != IDK_F32)
            return qbad(p, "qconv takes x, w (i8), w_scales, [b]");
        const idk_tensor_t *x = T(0), *w = T(1), *ws = T(2);
        int S = x->ndims - 2;
        if (S < 1 || S > 3 || op->ni != 4 * S + 13 || op->nf != 4) return qbad(p, "qconv attributes");
        if (x->dtype != IDK_F32 || w->dtype != IDK_I8 || !w->cdata || w->ndims != x->ndims)
            return qbad(p, "qconv needs f32 x and constant i8 weights of x's rank");
        if (ws->dtype != IDK_F32 || idk_tensor_volume(ws) != (size_t)w->dims[0] || !ws->cdata)
            return qbad(p, "qconv weight scales: constant f32, one per output channel");
        for (int64_t c = 0; c < w->dims[0]; c++)
            if (!(((const float *)ws->cdata)[c] > 0) || !isfinite(((const float *)ws->cdata)[c]))
                return qbad(p, "qconv weight scales must be positive and finite");
        if (op->nin == 4 && (T(3)->dtype != IDK_F32 || idk_tensor_volume(T(3)) != (size_t)w->dims[0] || !T(3)->cdata))
            return qbad(p, "qconv bias: constant f32, one per output channel");
        int64_t zp = op->ia[2 + 4 * S], sgn = op->ia[3 + 4 * S];
        if (sgn != 0 && sgn != 1) return qbad(p, "qconv x_signed must be 0 or 1");
        if (sgn ? (zp < -128 || zp > 127) : (zp < 0 || zp > 255)) return qbad(p, "qconv x zero point out of range");
        if (!(op->fa[0] > 0) || !isfinite(op->fa[0])) return qbad(p, "qconv x scale must be positive");
        /* the output written as 8-bit values (y), rounded through a quantization before the
         * sum (o), the summand read through its quantization (s): flag, zero point, signed */
        static const char *what[3] = {"y", "o", "s"};
        for (int k = 0; k < 3; k++) {
            const int64_t *q = op->ia + 4 + 4 * S + 3 * k;
            float sc = op->fa[1 + k];
            if (!q[0]) continue;
            if ((q[2] != 0 && q[2] != 1) || (q[2] ? (q[1] < -128 || q[1] > 127) : (q[1] < 0 || q[1] > 255)) || !(sc > 0) || !isfinite(sc))
                return idk_fail(p, IDK_ERR_INVALID, "op %d (kind %d): qconv %s quantization out of range", p->nops - 1, op->kind, what[k]);
        }
        if ((op->ia[7 + 4 * S] != 0) != (op->ia[10 + 4 * S] != 0)) return qbad(p, "qconv o and s quantizations come together");
        return IDK_OK; /* the post-ops, added after this check, are checked by qconv_posts_ok */
    }
    case IDK_OP_QMATMUL: {
        if (op->nin < 3 || op->nin > 4 || op->nout != 1 || o->dtype != IDK_F32 || op->ni != 2 || op->nf != 1)
            return qbad(p, "qmatmul takes x, w (i8), w_scales, [b]; i: x_zero_point, x_signed; f: x_scale");
        const idk_tensor_t *x = T(0), *w = T(1), *ws = T(2);
        if (x->dtype != IDK_F32 || x->ndims < 2 || w->dtype != IDK_I8 || !w->cdata || w->ndims != 2 ||
            w->dims[0] != x->dims[x->ndims - 1])
            return qbad(p, "qmatmul needs f32 x of rank >= 2 and constant i8 weights (K, N) with x's last dim K");
        int64_t n = w->dims[1];
        if (o->ndims != x->ndims || o->dims[o->ndims - 1] != n || memcmp(o->dims, x->dims, sizeof o->dims[0] * (size_t)(x->ndims - 1)))
            return qbad(p, "qmatmul output: x's dims with N last");
        if (ws->dtype != IDK_F32 || idk_tensor_volume(ws) != (size_t)n || !ws->cdata)
            return qbad(p, "qmatmul weight scales: constant f32, one per column");
        for (int64_t c = 0; c < n; c++)
            if (!(((const float *)ws->cdata)[c] > 0) || !isfinite(((const float *)ws->cdata)[c]))
                return qbad(p, "qmatmul weight scales must be positive and finite");
        if (op->nin == 4 && (T(3)->dtype != IDK_F32 || idk_tensor_volume(T(3)) != (size_t)n || !T(3)->cdata))
            return qbad(p, "qmatmul bias: constant f32, one per column");
        int64_t zp = op->ia[0], sgn = op->ia[1];
        if (sgn != 0 && sgn != 1) return qbad(p, "qmatmul x_signed must be 0 or 1");
        if (sgn ? (zp < -128 || zp > 127) : (zp < 0 || zp > 255)) return qbad(p, "qmatmul x zero point out of range");
        if (!(op->fa[0] > 0) || !isfinite(op->fa[0])) return qbad(p, "qmatmul x scale must be positive");
        return IDK_OK;
    }
    }
    return qbad(p, "unknown quantized op");
}

/* ---- QuantizeLinear / DequantizeLinear: C loops over (outer, C, inner) ---- */

static void qlayout(const idk_tensor_t *x, const idk_tensor_t *s, int64_t axis, idk_step_t *st) {
    int64_t outer = 1, c = 1, inner = 1;
    if (idk_tensor_volume(s) == 1 && s->ndims <= 1) {
        inner = (int64_t)idk_tensor_volume(x);
    } else {
        for (int i = 0; i < axis; i++) outer *= x->dims[i];
        c = x->dims[axis];
        for (int i = (int)axis + 1; i < x->ndims; i++) inner *= x->dims[i];
    }
    st->n1 = outer;
    st->n2 = c;
    st->n3 = inner;
}

static idk_status_t fn_quantize(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]), *sc = idk_buf_ptr(p, s->bufs[1]);
    const int64_t *zp = s->nb == 4 ? idk_buf_ptr(p, s->bufs[2]) : NULL;
    int64_t *y = idk_buf_ptr(p, s->bufs[s->nb - 1]);
    float lo = (float)s->extra[0], hi = (float)s->extra[1];
    int64_t outer = s->n1, C = s->n2, inner = s->n3;
#pragma omp parallel for collapse(2) if (outer * C * inner > 65536)
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < C; c++) {
            float scale = sc[c], z = zp ? (float)zp[c] : 0.f;
            const float *xi = x + (a * C + c) * inner;
            int64_t *yi = y + (a * C + c) * inner;
            for (int64_t i = 0; i < inner; i++) {
                /* ONNX: saturate(round_half_even(x / scale) + zero_point) */
                float v = nearbyintf(xi[i] / scale) + z;
                if (!(v >= lo)) v = isnan(v) ? z : lo; /* NaN: ORT gives the zero point */
                if (v > hi) v = hi;
                yi[i] = (int64_t)v;
            }
        }
    return IDK_OK;
}

static idk_status_t fn_dequantize(idk_plan_t *p, idk_step_t *s) {
    const int64_t *x = idk_buf_ptr(p, s->bufs[0]);
    const float *sc = idk_buf_ptr(p, s->bufs[1]);
    const int64_t *zp = s->nb == 4 ? idk_buf_ptr(p, s->bufs[2]) : NULL;
    float *y = idk_buf_ptr(p, s->bufs[s->nb - 1]);
    int64_t outer = s->n1, C = s->n2, inner = s->n3;
#pragma omp parallel for collapse(2) if (outer * C * inner > 65536)
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < C; c++) {
            float scale = sc[c];
            int64_t z = zp ? zp[c] : 0;
            const int64_t *xi = x + (a * C + c) * inner;
            float *yi = y + (a * C + c) * inner;
            for (int64_t i = 0; i < inner; i++) yi[i] = (float)(xi[i] - z) * scale;
        }
    return IDK_OK;
}

static idk_status_t lower_qdq(idk_plan_t *p, const idk_op_t *op) {
    int q = op->kind == IDK_OP_QUANTIZE;
    int bx, bs, bz = -1;
    if (idk_get_plain(p, op->in[0], &bx) != 0 || idk_get_plain(p, op->in[1], &bs) != 0) return IDK_ERR_DNNL;
    if (op->nin == 3 && idk_get_plain(p, op->in[2], &bz) != 0) return IDK_ERR_DNNL;
    int by = idk_new_out(p, op->out[0], NULL);
    idk_step_t *s = by < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = q ? fn_quantize : fn_dequantize;
    s->nb = 0;
    s->bufs[s->nb++] = bx;
    s->bufs[s->nb++] = bs;
    if (bz >= 0) s->bufs[s->nb++] = bz;
    s->bufs[s->nb++] = by;
    qlayout(T(0), T(1), op->ia[0], s);
    if (q) {
        if (!(s->extra = malloc(2 * sizeof *s->extra))) return IDK_ERR_NOMEM;
        s->extra[0] = op->ia[1];
        s->extra[1] = op->ia[2];
    }
    return IDK_OK;
}

/* ---- QCONV: oneDNN int8 convolution ---- */

/* A weight scale of 0 (an all-zero channel) would make the bias division infinite; the
 * quantizer writes 1 for such channels, and idk_check_quant rejects non-positive scales. */

static idk_status_t qdnnl_err(idk_plan_t *p, const char *what, dnnl_status_t s) {
    return idk_fail(p, IDK_ERR_DNNL, "op %d: %s: oneDNN status %d", p->cur_op, what, (int)s);
}

/* const_buffer copies n bytes into a new plan-owned buffer outside the arena. */
static int const_buffer(idk_plan_t *p, const void *src, size_t n, void **out) {
    void *d = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
    if (!d) return -1;
    memcpy(d, src, n);
    int b = idk_new_buffer(p, n);
    if (b < 0) {
        free(d);
        return -1;
    }
    p->b[b].ext = d;
    p->b[b].first = -2; /* owned external buffer (freed with the plan) */
    if (out) *out = d;
    return b;
}

/* reorder_const reorders constant data in layout src into a new plan-owned buffer in layout dst. */
static int reorder_const(idk_plan_t *p, const dnnl_memory_desc_t *src, void *sdata, const dnnl_memory_desc_t *dst) {
    size_t sz = dnnl_memory_desc_get_size(dst);
    void *d = aligned_alloc(64, (sz + 63) / 64 * 64 + 64);
    if (!d) return -1;
    memset(d, 0, sz);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t pr = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    int ok = dnnl_reorder_primitive_desc_create(&pd, src, p->eng, dst, p->eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&pr, pd) == dnnl_success &&
             dnnl_memory_create(&ms, src, p->eng, sdata) == dnnl_success &&
             dnnl_memory_create(&md, dst, p->eng, d) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
        ok = dnnl_primitive_execute(pr, p->stream, 2, args) == dnnl_success && dnnl_stream_wait(p->stream) == dnnl_success;
    }
    if (ms) dnnl_memory_destroy(ms);
    if (md) dnnl_memory_destroy(md);
    if (pr) dnnl_primitive_destroy(pr);
    if (pd) dnnl_primitive_desc_destroy(pd);
    int b = ok ? idk_new_buffer(p, sz) : -1;
    if (b < 0) {
        free(d);
        return -1;
    }
    p->b[b].ext = d;
    p->b[b].first = -2;
    return b;
}

static void tag_md(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    dnnl_dims_t d = {0};
    for (int i = 0; i < nd && i < DNNL_MAX_NDIMS; i++) d[i] = dims[i];
    dnnl_memory_desc_init_by_tag(md, nd, d, dt, tag);
}

static dnnl_format_tag_t plain_tag(int nd) {
    switch (nd) {
    case 1: return dnnl_a;
    case 2: return dnnl_ab;
    case 3: return dnnl_abc;
    case 4: return dnnl_abcd;
    case 5: return dnnl_abcde;
    default: return dnnl_abcdef;
    }
}

/* A quantize_step's reorder is marked (in fields its oneDNN step does not use: n1 = 1 + the
 * tensor id, n2 = zero point, fv = scale) so that another reader quantizing the same tensor
 * the same way into the same layout (ResNet's downsampling block: the block's first 1x1
 * convolution and its shortcut) reuses the buffer instead of repeating the reorder. */
#define QSTEP_TAG(s) ((s)->n1)

/* quantize_step returns a buffer holding tensor tid (f32 buffer xb in layout xmd) quantized
 * into layout qmd: q = saturate(round(x / xs) + zp), adding a oneDNN reorder unless an
 * earlier step made it already. Returns -1 on failure. */
static int quantize_step(idk_plan_t *p, int tid, const dnnl_memory_desc_t *xmd, int xb, const dnnl_memory_desc_t *qmd, float xs,
                         int32_t zp, int share) {
    for (int i = p->ns - 1; share && i >= 0; i--) {
        const idk_step_t *e = &p->s[i];
        if (!e->fn && QSTEP_TAG(e) == 1 + (int64_t)tid && e->n2 == zp && e->fv == xs && e->nargs == 2 &&
            e->arg[1].kind == DNNL_ARG_TO && dnnl_memory_desc_equal(&e->arg[1].md, qmd))
            return e->arg[1].buf;
    }
    dnnl_primitive_attr_t qa = idk_new_attr();
    if (!qa) return -1;
    float inv = 1.0f / xs;
    dnnl_status_t qs = dnnl_primitive_attr_set_output_scales(qa, 1, 0, &inv);
    if (qs == dnnl_success && zp != 0) qs = dnnl_primitive_attr_set_zero_points(qa, DNNL_ARG_DST, 1, 0, &zp);
    dnnl_primitive_desc_t rpd = NULL;
    if (qs == dnnl_success) qs = dnnl_reorder_primitive_desc_create(&rpd, xmd, p->eng, qmd, p->eng, qa);
    dnnl_primitive_attr_destroy(qa);
    if (qs != dnnl_success) {
        qdnnl_err(p, "int8 quantize reorder", qs);
        return -1;
    }
    int qb = idk_new_buffer(p, dnnl_memory_desc_get_size(qmd));
    idk_step_t *rs;
    if (qb < 0 || idk_finish_prim(p, rpd, &rs) != IDK_OK) {
        dnnl_primitive_desc_destroy(rpd);
        return -1;
    }
    dnnl_primitive_desc_destroy(rpd);
    idk_step_arg(rs, DNNL_ARG_FROM, xmd, xb);
    idk_step_arg(rs, DNNL_ARG_TO, qmd, qb);
    QSTEP_TAG(rs) = share ? 1 + (int64_t)tid : 0; /* unshared: the caller writes over it */
    rs->n2 = zp;
    rs->fv = xs;
    return qb;
}

/* int8_scales sets an int8 convolution's or matmul's output scales, xs * ws[c] / ys per
 * output channel (mask on dim 1), and runtime zero points for src (zp) and dst (yzp) where
 * they are not 0. */
static dnnl_status_t int8_scales(dnnl_primitive_attr_t attr, int64_t n, const float *wsc, float xs, float ys, int64_t zp, int64_t yzp) {
    float *osc = malloc((size_t)n * sizeof *osc);
    if (!osc) return dnnl_out_of_memory;
    for (int64_t c = 0; c < n; c++) osc[c] = xs * wsc[c] / ys;
    dnnl_status_t ds = dnnl_primitive_attr_set_output_scales(attr, n, 1 << 1, osc);
    free(osc);
    int32_t zrt = DNNL_RUNTIME_S32_VAL;
    if (ds == dnnl_success && zp != 0) ds = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &zrt);
    if (ds == dnnl_success && yzp != 0) ds = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &zrt);
    return ds;
}

/* int8_consts adds the constant buffers an int8 convolution or matmul reads: the bias
 * (input 3, when present) prescaled by 1 / (xs * ws[c]), since oneDNN 2.x adds it to the s32
 * accumulator before the output scales, and the zero points (-1 where 0). Returns 0, or -1. */
static int int8_consts(idk_plan_t *p, const idk_op_t *op, int64_t n, const float *wsc, float xs, int32_t zp, int32_t yzp,
                       int *bb, int *zb, int *yzb) {
    *bb = *zb = *yzb = -1;
    if (op->nin == 4) {
        const float *bv = T(3)->cdata;
        float *sb = malloc((size_t)n * sizeof *sb);
        if (!sb) return -1;
        for (int64_t c = 0; c < n; c++) sb[c] = bv[c] / (xs * wsc[c]);
        *bb = const_buffer(p, sb, (size_t)n * sizeof *sb, NULL);
        free(sb);
        if (*bb < 0) return -1;
    }
    if (zp != 0 && (*zb = const_buffer(p, &zp, sizeof zp, NULL)) < 0) return -1;
    if (yzp != 0 && (*yzb = const_buffer(p, &yzp, sizeof yzp, NULL)) < 0) return -1;
    return 0;
}

/* int8_zero_args passes the zero-point buffers int8_consts made to step s. */
static void int8_zero_args(idk_step_t *s, int zb, int yzb) {
    dnnl_memory_desc_t zmd;
    int64_t one = 1;
    tag_md(&zmd, 1, &one, dnnl_s32, dnnl_a);
    if (zb >= 0) idk_step_arg(s, DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, &zmd, zb);
    if (yzb >= 0) idk_step_arg(s, DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, &zmd, yzb);
}

/* slow_amx_eltwise reports whether an int8 convolution's post-ops hold an activation other
 * than ReLU, Clip or a linear one (SiLU, sigmoid, hard-swish, ...): oneDNN 2.6's AMX int8
 * convolutions apply those far slower than its VNNI brgconv kernels (EfficientNet-B0's
 * expansion 1x1 convolutions with SiLU; benchmarks/README.md), so such convolutions take the
 * first implementation that is neither AMX nor the reference. IDK_INT8_AMX_ELTWISE=0 keeps
 * oneDNN's first choice. */
static int slow_amx_eltwise(const idk_op_t *op) {
    if (env_off("IDK_INT8_AMX_ELTWISE")) return 0;
    for (int i = 0; i < op->npost; i++) {
        const idk_post_t *q = &op->post[i];
        if (q->kind == IDK_POST_ELTWISE && !(q->alg == IDK_ELT_RELU && q->alpha == 0) && q->alg != IDK_ELT_CLIP &&
            q->alg != IDK_ELT_LINEAR)
            return 1;
    }
    return 0;
}

/* non_amx_pd returns pd when its implementation is not AMX, else the first of cd's
 * implementations that is neither AMX nor the reference (pd destroyed), or pd if none. */
static dnnl_primitive_desc_t non_amx_pd(idk_plan_t *p, dnnl_primitive_desc_t pd, const dnnl_convolution_desc_t *cd,
                                        const_dnnl_primitive_attr_t attr) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl || !strstr(impl, "amx"))
        return pd;
    dnnl_primitive_desc_iterator_t it;
    if (dnnl_primitive_desc_iterator_create(&it, cd, attr, p->eng, NULL) != dnnl_success) return pd;
    do {
        dnnl_primitive_desc_t c = dnnl_primitive_desc_iterator_fetch(it);
        const char *ci = NULL;
        if (c && dnnl_primitive_desc_query(c, dnnl_query_impl_info_str, 0, &ci) == dnnl_success && ci && !strstr(ci, "amx") &&
            !strstr(ci, "ref")) {
            dnnl_primitive_desc_destroy(pd);
            pd = c;
            break;
        }
        if (c) dnnl_primitive_desc_destroy(c);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    return pd;
}

/* qconv_posts_ok checks a QCONV's post-ops against its quantizations (S spatial dims): a
 * rounded output (o) takes a sum first and at most a ReLU after it. */
static int qconv_posts_ok(idk_plan_t *p, const idk_op_t *op, int S) {
    int yq = op->ia[4 + 4 * S] != 0, oq = op->ia[7 + 4 * S] != 0, nsum = 0;
    for (int i = 0; i < op->npost; i++) nsum += op->post[i].kind == IDK_POST_SUM;
    const char *bad = NULL;
    if (oq && (op->npost < 1 || op->npost > 2 || op->post[0].kind != IDK_POST_SUM ||
               (op->npost == 2 && !(op->post[1].kind == IDK_POST_ELTWISE && op->post[1].alg == IDK_ELT_RELU && op->post[1].alpha == 0))))
        bad = "a rounded output takes a sum post-op and at most a ReLU";
    else if (yq && nsum && !oq)
        bad = "an 8-bit output takes no float sum post-op";
    else if (op->npost + yq > IDK_MAX_POST)
        bad = "too many post-ops";
    if (bad) idk_fail(p, IDK_ERR_INVALID, "op %d: qconv: %s", p->cur_op, bad);
    return bad == NULL;
}

/* quant_sum_dst returns the buffer an int8 convolution with a quantized summand (tensor
 * sum_tid, scale ss, zero point sz, type sdt) writes its output y (dst layout dmd) into,
 * holding the summand before the convolution runs. An 8-bit y (yq) sums the summand's 8-bit
 * values: the producer's (chainQDQ) or a quantized copy made here, overwritten in place. A
 * float y sums a dequantized copy: ss * (q - sz) in dmd's layout. -1 on failure. */
static int quant_sum_dst(idk_plan_t *p, const idk_op_t *op, int sum_tid, const dnnl_memory_desc_t *dmd, int yq,
                         dnnl_data_type_t sdt, float ss, int32_t sz) {
    idk_view_t *v;
    if (idk_primary(p, sum_tid, &v) != 0) return -1;
    dnnl_memory_desc_t vmd = v->md;
    int vb = v->buf, v8 = vmd.data_type == dnnl_u8 || vmd.data_type == dnnl_s8;
    if (v8 && vmd.data_type != sdt) {
        idk_fail(p, IDK_ERR_INVALID, "op %d: 8-bit summand of the wrong signedness", p->cur_op);
        return -1;
    }
    if (yq) {
        if (dmd->data_type != sdt) {
            idk_fail(p, IDK_ERR_INVALID, "op %d: 8-bit summand and output differ in signedness", p->cur_op);
            return -1;
        }
        if (v8) return idk_dst_for_sum(p, op, sum_tid, dmd);
        int qb = quantize_step(p, sum_tid, &vmd, vb, dmd, ss, sz, 0);
        if (qb < 0 || idk_set_output(p, op->out[0], dmd, 0, qb) != 0) return -1;
        return qb;
    }
    dnnl_memory_desc_t qmd = vmd;
    int qb = vb;
    if (!v8) { /* quantize first (shared with a convolution reading it alike) */
        qmd.data_type = sdt;
        if ((qb = quantize_step(p, sum_tid, &vmd, vb, &qmd, ss, sz, 1)) < 0) return -1;
    }
    dnnl_primitive_attr_t a = idk_new_attr();
    if (!a) return -1;
    dnnl_status_t st = dnnl_primitive_attr_set_output_scales(a, 1, 0, &ss);
    if (st == dnnl_success && sz != 0) st = dnnl_primitive_attr_set_zero_points(a, DNNL_ARG_SRC, 1, 0, &sz);
    dnnl_primitive_desc_t rpd = NULL;
    if (st == dnnl_success) st = dnnl_reorder_primitive_desc_create(&rpd, &qmd, p->eng, dmd, p->eng, a);
    dnnl_primitive_attr_destroy(a);
    if (st != dnnl_success) {
        qdnnl_err(p, "int8 summand dequantizing reorder", st);
        return -1;
    }
    int db = idk_new_out(p, op->out[0], dmd);
    idk_step_t *rs;
    if (db < 0 || idk_finish_prim(p, rpd, &rs) != IDK_OK) {
        dnnl_primitive_desc_destroy(rpd);
        return -1;
    }
    dnnl_primitive_desc_destroy(rpd);
    idk_step_arg(rs, DNNL_ARG_FROM, &qmd, qb);
    idk_step_arg(rs, DNNL_ARG_TO, dmd, db);
    return db;
}

static idk_status_t lower_qconv(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *w = T(1), *o = OUT;
    const float *wsc = T(2)->cdata;
    int nd = x->ndims, S = nd - 2;
    const int64_t *ia = op->ia;
    int64_t g = ia[1 + 4 * S], zp = ia[2 + 4 * S];
    int sgn = (int)ia[3 + 4 * S];
    float xs = op->fa[0];
    /* an 8-bit output (chainQDQ): requantized with y's scale and zero point, for int8
     * convolutions reading it as it is. ReLU and Clip commute with the positive 1/y_scale,
     * which then folds into the output scales (Clip's bounds scaled); other activations get
     * it as a last linear post-op */
    if (!qconv_posts_ok(p, op, S)) return IDK_ERR_INVALID;
    int yq = ia[4 + 4 * S] != 0, oq = ia[7 + 4 * S] != 0, fold = !oq;
    for (int i = 0; yq && i < op->npost; i++)
        if (!(op->post[i].alg == IDK_ELT_RELU && op->post[i].alpha == 0) && op->post[i].alg != IDK_ELT_CLIP) fold = 0;
    int64_t yzp = yq ? ia[5 + 4 * S] : 0;
    float ys = yq ? op->fa[1] : 1.0f;
    dnnl_data_type_t ddt = !yq ? dnnl_f32 : ia[6 + 4 * S] ? dnnl_s8 : dnnl_u8;
    /* fuseQDQAdd: the output rounded through (os, oz), then the summand added through its
     * quantization (ss, sz: 8-bit values) */
    int64_t oz = ia[8 + 4 * S], sz = ia[11 + 4 * S];
    int osg = (int)ia[9 + 4 * S], ssg = (int)ia[12 + 4 * S];
    float os = op->fa[2], ss = op->fa[3];
    int64_t oc = w->dims[0];
    dnnl_dims_t st, dl, pb, pe;
    for (int i = 0; i < S; i++) {
        st[i] = ia[1 + i];
        dl[i] = ia[1 + S + i] - 1;
        pb[i] = ia[1 + 2 * S + i];
        pe[i] = ia[1 + 3 * S + i];
    }
    dnnl_data_type_t sdt = sgn ? dnnl_s8 : dnnl_u8;
    dnnl_memory_desc_t src, wei, bias, dst;
    tag_md(&src, nd, x->dims, sdt, dnnl_format_tag_any);
    tag_md(&dst, nd, o->dims, ddt, dnnl_format_tag_any);
    int64_t wd[IDK_MAX_DIMS + 1];
    int wn = nd;
    if (g > 1) {
        wd[0] = g;
        wd[1] = oc / g;
        for (int i = 1; i < nd; i++) wd[i + 1] = w->dims[i];
        wn = nd + 1;
    } else {
        for (int i = 0; i < nd; i++) wd[i] = w->dims[i];
    }
    tag_md(&wei, wn, wd, dnnl_s8, dnnl_format_tag_any);
    int has_bias = op->nin == 4;
    if (has_bias) tag_md(&bias, 1, &oc, dnnl_f32, dnnl_a);
    dnnl_convolution_desc_t cd;
    dnnl_status_t ds = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src,
                                                                  &wei, has_bias ? &bias : NULL, &dst, st, dl, pb, pe);
    if (ds != dnnl_success) return qdnnl_err(p, "int8 conv desc", ds);
    dnnl_primitive_attr_t attr = idk_new_attr();
    if (!attr) return IDK_ERR_NOMEM;
    /* dst = (xs * ws[c]) * sum((x_q - zp) * w_q) + bias: the s32 accumulator scaled per output channel */
    ds = int8_scales(attr, oc, wsc, xs, oq ? os : fold ? ys : 1.0f, zp, yzp);
    int32_t zpv = (int32_t)zp, yzpv = (int32_t)yzp;
    if (ds != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return qdnnl_err(p, "int8 conv scales", ds);
    }
    int sum_tid;
    /* post-ops act on the output scales' result */
    idk_op_t scaled = *op;
    for (int i = 0; yq && fold && i < scaled.npost; i++)
        if (scaled.post[i].alg == IDK_ELT_CLIP) {
            scaled.post[i].alpha /= ys;
            scaled.post[i].beta /= ys;
        }
#define ELT(a, x, y) ((idk_post_t){.kind = IDK_POST_ELTWISE, .alg = (a), .alpha = (x), .beta = (y), .tensor = -1})
    if (oq) {
        /* in units of os (1 / os in the output scales): round and saturate (QuantizeLinear
         * less its zero point), add the summand, scaled by ss / os from its 8-bit values or
         * by 1 / os from a dequantized copy (quant_sum_dst), ReLU (commutes with the scale),
         * then one linear post-op to y's units: oneDNN 2.6's convolutions apply a chain's
         * second linear post-op with the first one's scale */
        scaled.npost = 0;
        scaled.post[scaled.npost++] = ELT(IDK_ELT_ROUND, 0, 0);
        scaled.post[scaled.npost++] = ELT(IDK_ELT_CLIP, (float)((osg ? -128 : 0) - oz), (float)((osg ? 127 : 255) - oz));
        idk_post_t sum = op->post[0];
        sum.alg = yq ? (ssg ? 2 : 1) : 3;
        sum.alpha = yq ? ss / os : 1.0f / os;
        sum.beta = yq ? (float)sz : 0;
        scaled.post[scaled.npost++] = sum;
        if (op->npost == 2) scaled.post[scaled.npost++] = op->post[1];
        scaled.post[scaled.npost++] = ELT(IDK_ELT_LINEAR, os / ys, 0);
    } else if (yq && !fold) { /* room checked by qconv_posts_ok */
        scaled.post[scaled.npost++] = ELT(IDK_ELT_LINEAR, 1.0f / ys, 0);
    }
#undef ELT
    idk_status_t rc = idk_with_post_ops(p, &scaled, attr, &sum_tid);
    if (rc != IDK_OK) {
        dnnl_primitive_attr_destroy(attr);
        return rc;
    }
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &cd, attr, p->eng, NULL);
    if (ds == dnnl_success && slow_amx_eltwise(op)) pd = non_amx_pd(p, pd, &cd, attr);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return qdnnl_err(p, "int8 conv primitive desc (needs a CPU with int8 support)", ds);
    dnnl_memory_desc_t smd = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    dnnl_memory_desc_t wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_desc_t dmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    rc = IDK_ERR_DNNL;
    int xb, qb, wb, bb, db, zb, yzb;
    /* the input's float view in the 8-bit layout's shape: plain, or nChw16c-like blocked is
     * fine too; reorder from the producer's primary layout */
    idk_view_t *xv;
    if (idk_primary(p, op->in[0], &xv) != 0) goto out;
    xb = xv->buf;
    dnnl_memory_desc_t xmd = xv->md;
    if (xmd.data_type == dnnl_u8 || xmd.data_type == dnnl_s8) {
        /* written quantized by an int8 convolution with this op's input scale (chainQDQ):
         * used as it is, or copied into the layout this convolution takes */
        if (xmd.data_type != sdt) {
            idk_fail(p, IDK_ERR_INVALID, "op %d: 8-bit input of the wrong signedness", p->cur_op);
            goto out;
        }
        if (dnnl_memory_desc_equal(&xmd, &smd)) {
            qb = xb;
        } else {
            dnnl_primitive_desc_t rpd = NULL;
            idk_step_t *rs;
            if (dnnl_reorder_primitive_desc_create(&rpd, &xmd, p->eng, &smd, p->eng, NULL) != dnnl_success ||
                (qb = idk_new_buffer(p, dnnl_memory_desc_get_size(&smd))) < 0 || idk_finish_prim(p, rpd, &rs) != IDK_OK) {
                if (rpd) dnnl_primitive_desc_destroy(rpd);
                idk_fail(p, IDK_ERR_DNNL, "op %d: int8 layout reorder", p->cur_op);
                goto out;
            }
            dnnl_primitive_desc_destroy(rpd);
            idk_step_arg(rs, DNNL_ARG_FROM, &xmd, xb);
            idk_step_arg(rs, DNNL_ARG_TO, &smd, qb);
        }
    } else {
        if ((qb = quantize_step(p, op->in[0], &xmd, xb, &smd, xs, zpv, 1)) < 0) goto out;
    }
    {
        dnnl_memory_desc_t wpm;
        tag_md(&wpm, wn, wd, dnnl_s8, plain_tag(wn));
        if ((wb = reorder_const(p, &wpm, w->cdata, &wmd)) < 0) {
            idk_fail(p, IDK_ERR_DNNL, "op %d: int8 weight reorder failed", p->cur_op);
            goto out;
        }
    }
    if (int8_consts(p, op, oc, wsc, xs, zpv, yzpv, &bb, &zb, &yzb) != 0) goto out;
    if (oq)
        db = quant_sum_dst(p, op, sum_tid, &dmd, yq, ssg ? dnnl_s8 : dnnl_u8, ss, (int32_t)sz);
    else
        db = sum_tid >= 0 ? idk_dst_for_sum(p, op, sum_tid, &dmd) : idk_new_out(p, op->out[0], &dmd);
    if (db < 0) goto out;
    idk_step_t *s;
    if ((rc = idk_finish_prim(p, pd, &s)) != IDK_OK) goto out;
    idk_step_arg(s, DNNL_ARG_SRC, &smd, qb);
    idk_step_arg(s, DNNL_ARG_WEIGHTS, &wmd, wb);
    if (has_bias) idk_step_arg(s, DNNL_ARG_BIAS, &bias, bb);
    idk_step_arg(s, DNNL_ARG_DST, &dmd, db);
    int8_zero_args(s, zb, yzb);
    rc = IDK_OK;
out:
    dnnl_primitive_desc_destroy(pd);
    if (rc != IDK_OK && p->err[0] == 0) idk_fail(p, rc, "op %d: int8 conv lowering failed", p->cur_op);
    return rc;
}

/* ---- QMATMUL: oneDNN int8 matmul on x flattened to (M, K) rows ---- */

static idk_status_t lower_qmatmul(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *w = T(1), *o = OUT;
    const float *wsc = T(2)->cdata;
    int64_t K = w->dims[0], N = w->dims[1], M = (int64_t)(idk_tensor_volume(x) / (size_t)K);
    int64_t zp = op->ia[0];
    int sgn = (int)op->ia[1];
    float xs = op->fa[0];
    if (M == 0) return idk_new_out(p, op->out[0], NULL) < 0 ? IDK_ERR_NOMEM : IDK_OK;
    int64_t ad[2] = {M, K}, bd[2] = {K, N}, dd[2] = {M, N}, bsd[2] = {1, N};
    dnnl_memory_desc_t src, wei, bias, dst, wpm, xf;
    tag_md(&src, 2, ad, sgn ? dnnl_s8 : dnnl_u8, dnnl_ab);
    tag_md(&xf, 2, ad, dnnl_f32, dnnl_ab);
    tag_md(&wei, 2, bd, dnnl_s8, dnnl_format_tag_any);
    tag_md(&wpm, 2, bd, dnnl_s8, dnnl_ab);
    tag_md(&dst, 2, dd, dnnl_f32, dnnl_ab);
    int has_bias = op->nin == 4;
    if (has_bias) tag_md(&bias, 2, bsd, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t md;
    dnnl_status_t ds = dnnl_matmul_desc_init(&md, &src, &wei, has_bias ? &bias : NULL, &dst);
    if (ds != dnnl_success) return qdnnl_err(p, "int8 matmul desc", ds);
    dnnl_primitive_attr_t attr = idk_new_attr();
    if (!attr) return IDK_ERR_NOMEM;
    ds = int8_scales(attr, N, wsc, xs, 1.0f, zp, 0);
    int32_t zpv = (int32_t)zp;
    if (ds != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return qdnnl_err(p, "int8 matmul scales", ds);
    }
    int sum_tid;
    idk_status_t rc = idk_with_post_ops(p, op, attr, &sum_tid);
    if (rc != IDK_OK) {
        dnnl_primitive_attr_destroy(attr);
        return rc;
    }
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &md, attr, p->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return qdnnl_err(p, "int8 matmul primitive desc (needs a CPU with int8 support)", ds);
    dnnl_memory_desc_t wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_desc_t omd; /* y's own dims, plain: the same bytes as dst */
    idk_plain_md(&omd, o->ndims, o->dims);
    rc = IDK_ERR_DNNL;
    int xb, qb, wb, bb, db, zb, yzb;
    if (idk_get_plain(p, op->in[0], &xb) != 0) goto out;
    if ((qb = quantize_step(p, op->in[0], &xf, xb, &src, xs, zpv, 1)) < 0) goto out;
    if ((wb = reorder_const(p, &wpm, w->cdata, &wmd)) < 0) {
        idk_fail(p, IDK_ERR_DNNL, "op %d: int8 matmul weight reorder failed", p->cur_op);
        goto out;
    }
    if (int8_consts(p, op, N, wsc, xs, zpv, 0, &bb, &zb, &yzb) != 0) goto out;
    db = sum_tid >= 0 ? idk_dst_for_sum(p, op, sum_tid, &omd) : idk_new_out(p, op->out[0], &omd);
    if (db < 0) goto out;
    idk_step_t *s;
    if ((rc = idk_finish_prim(p, pd, &s)) != IDK_OK) goto out;
    idk_step_arg(s, DNNL_ARG_SRC, &src, qb);
    idk_step_arg(s, DNNL_ARG_WEIGHTS, &wmd, wb);
    if (has_bias) idk_step_arg(s, DNNL_ARG_BIAS, &bias, bb);
    idk_step_arg(s, DNNL_ARG_DST, &dst, db);
    int8_zero_args(s, zb, yzb);
    rc = IDK_OK;
out:
    dnnl_primitive_desc_destroy(pd);
    if (rc != IDK_OK && p->err[0] == 0) idk_fail(p, rc, "op %d: int8 matmul lowering failed", p->cur_op);
    return rc;
}

idk_status_t idk_lower_quant(idk_plan_t *p, const idk_op_t *op) {
    switch (op->kind) {
    case IDK_OP_QUANTIZE:
    case IDK_OP_DEQUANTIZE: return lower_qdq(p, op);
    case IDK_OP_QCONV: return lower_qconv(p, op);
    case IDK_OP_QMATMUL: return lower_qmatmul(p, op);
    }
    return idk_fail(p, IDK_ERR_INVALID, "op %d: unknown quantized kind %d", p->cur_op, op->kind);
}

/* ---- the int8 peak: AVX-512 VNNI multiply-accumulate (vpdpbusd), measured like peak.c ---- */

#include <immintrin.h>
#include <omp.h>

/* Each vpdpbusd on 512 bits does 64 u8 x s8 multiplies and adds them into 16 s32 lanes:
 * 128 integer ops, counted like a float FMA's two. 16 independent accumulators keep the
 * units busy. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double vnni512(long iters) {
    __m512i a[16], u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_epi32(i);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbusd_epi32(a[i], u, s);
    __m512i t = a[0];
    for (int i = 1; i < 16; i++) t = _mm512_add_epi32(t, a[i]);
    int out[16];
    _mm512_storeu_si512(out, t);
    return out[0] * 0.0 + (double)iters * 16 * 64 * 2;
}

/* idk_int8_run runs the VNNI loop for `iters` rounds on `threads` threads and returns the
 * integer ops done, or 0 on a CPU without AVX-512 VNNI. */
IDK_API double idk_int8_run(int32_t threads, int64_t iters) {
    if (threads < 1) threads = 1;
    if (iters < 1) iters = 1;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni")) return 0;
    double ops = 0;
#pragma omp parallel num_threads(threads) reduction(+ : ops)
    ops += vnni512((long)iters);
    return ops;
}
