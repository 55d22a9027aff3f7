//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* ops.c: checks each op's arguments and lowers it into steps (oneDNN primitives or C loops). */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl_debug.h>

#include "internal.h"

#define T(i) (&p->t[op->in[i]])
#define OUT (&p->t[op->out[0]])

static idk_status_t bad(idk_plan_t *p, const char *what) {
    return idk_fail(p, IDK_ERR_INVALID, "op %d (kind %d): %s", p->nops - 1, p->ops[p->nops - 1].kind, what);
}

static int same_dims(const idk_tensor_t *a, const idk_tensor_t *b) {
    if (a->ndims != b->ndims) return 0;
    for (int i = 0; i < a->ndims; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

idk_status_t idk_check_op(idk_plan_t *p, const idk_op_t *op) {
    if (IDK_IS_QUANT_OP(op->kind)) return idk_check_quant(p, op);
    const idk_tensor_t *o = OUT;
    int f32 = o->dtype == IDK_F32;
    for (int i = 0; i < op->nin; i++)
        if (T(i)->dtype != IDK_F32 && op->kind != IDK_OP_GATHER && op->kind != IDK_OP_CONCAT &&
            op->kind != IDK_OP_RESHAPE && op->kind != IDK_OP_SLICE && op->kind != IDK_OP_PAD &&
            op->kind != IDK_OP_TRANSPOSE && op->kind != IDK_OP_COPY && op->kind != IDK_OP_CAST &&
            op->kind != IDK_OP_COMPARE && op->kind != IDK_OP_WHERE && op->kind != IDK_OP_EXPAND &&
            op->kind != IDK_OP_CUMSUM && op->kind != IDK_OP_UNARY && op->kind != IDK_OP_BINARY &&
            op->kind != IDK_OP_RESIZE)
            return bad(p, "non-float input");
    switch (op->kind) {
    case IDK_OP_CONV: {
        if (op->nin < 2 || op->nin > 3 || op->nout != 1 || !f32) return bad(p, "conv takes x, w, [b]");
        int nd = T(0)->ndims, S = nd - 2;
        if (nd < 3 || nd > 5 || op->ni != 2 + 4 * S || op->ia[0] != S || T(1)->ndims != nd || o->ndims != nd)
            return bad(p, "conv rank/attributes");
        int64_t g = op->ia[1 + 4 * S];
        if (g < 1 || T(0)->dims[1] % g || T(1)->dims[0] % g || T(1)->dims[1] * g != T(0)->dims[1] ||
            o->dims[1] != T(1)->dims[0] || o->dims[0] != T(0)->dims[0])
            return bad(p, "conv channels/groups");
        if (op->nin == 3 && (T(2)->ndims != 1 || T(2)->dims[0] != o->dims[1])) return bad(p, "conv bias shape");
        for (int i = 0; i < S; i++) {
            int64_t st = op->ia[1 + i], dl = op->ia[1 + S + i], pb = op->ia[1 + 2 * S + i], pe = op->ia[1 + 3 * S + i];
            int64_t k = T(1)->dims[2 + i];
            if (st < 1 || dl < 1 || pb < 0 || pe < 0) return bad(p, "conv stride/dilation/pad");
            int64_t ke = (k - 1) * dl + 1;
            int64_t want = (T(0)->dims[2 + i] + pb + pe - ke) / st + 1;
            if (T(0)->dims[2 + i] + pb + pe < ke || want != o->dims[2 + i]) return bad(p, "conv output size");
        }
        return IDK_OK;
    }
    case IDK_OP_POOL: {
        if (op->nin != 1 || op->nout != 1 || !f32) return bad(p, "pool takes x");
        int nd = T(0)->ndims, S = nd - 2;
        if (nd < 3 || nd > 5 || op->ni != 2 + 5 * S || op->ia[1] != S || o->ndims != nd || op->ia[0] < 0 ||
            op->ia[0] > 2 || o->dims[0] != T(0)->dims[0] || o->dims[1] != T(0)->dims[1])
            return bad(p, "pool rank/attributes");
        for (int i = 0; i < S; i++) {
            int64_t k = op->ia[2 + i], st = op->ia[2 + S + i], dl = op->ia[2 + 2 * S + i], pb = op->ia[2 + 3 * S + i],
                    pe = op->ia[2 + 4 * S + i];
            if (k < 1 || st < 1 || dl < 1 || pb < 0 || pe < 0) return bad(p, "pool kernel/stride/pad");
            int64_t ke = (k - 1) * dl + 1;
            if (T(0)->dims[2 + i] + pb + pe < ke || (T(0)->dims[2 + i] + pb + pe - ke) / st + 1 != o->dims[2 + i])
                return bad(p, "pool output size");
            if (pb >= ke || pe >= ke) return bad(p, "pool padding not smaller than the kernel");
        }
        return IDK_OK;
    }
    case IDK_OP_ELTWISE:
        if (op->nin != 1 || op->nout != 1 || op->ni != 1 || op->nf != 2 || !same_dims(T(0), o) || op->ia[0] < 0 ||
            op->ia[0] > IDK_ELT_ROUND || !f32)
            return bad(p, "eltwise takes x, alg, alpha, beta");
        return IDK_OK;
    case IDK_OP_BINARY: {
        if (op->nin != 2 || op->nout != 1 || op->ni != 1 || op->ia[0] < 0 || op->ia[0] > IDK_BIN_FMOD ||
            (f32 && op->ia[0] == IDK_BIN_MOD))
            return bad(p, "binary takes a, b, alg");
        if (T(0)->dtype != o->dtype || T(1)->dtype != o->dtype ||
            (!f32 && (o->dtype != IDK_I64 || op->ia[0] == IDK_BIN_PRELU || op->ia[0] == IDK_BIN_POW)))
            return bad(p, "binary input/output types");
        for (int k = 0; k < 2; k++) {
            const idk_tensor_t *x = T(k);
            if (x->ndims > o->ndims) return bad(p, "binary input rank above output rank");
            for (int i = 0; i < x->ndims; i++) {
                int64_t d = x->dims[x->ndims - 1 - i], od = o->dims[o->ndims - 1 - i];
                if (d != od && d != 1) return bad(p, "binary shapes do not broadcast to the output");
            }
        }
        return IDK_OK;
    }
    case IDK_OP_MATMUL: {
        int nd = o->ndims;
        if (op->nin < 2 || op->nin > 3 || op->nout != 1 || (op->ni != 2 && op->ni != 2 + 3 * nd) || op->nf != 1 || !f32)
            return bad(p, "matmul takes a, b, [bias], trans_a, trans_b, [perm_a, perm_b, perm_y], alpha");
        if (nd < 2 || nd > 6 || T(0)->ndims != nd || T(1)->ndims != nd) return bad(p, "matmul ranks");
        int64_t pa[IDK_MAX_DIMS], pb[IDK_MAX_DIMS], py[IDK_MAX_DIMS];
        const int64_t *a = T(0)->dims, *b = T(1)->dims;
        if (op->ni > 2) {
            if (op->ia[0] || op->ia[1]) return bad(p, "matmul: trans flags with permutations");
            int seen[3][IDK_MAX_DIMS] = {{0}};
            for (int k = 0; k < 3; k++)
                for (int i = 0; i < nd; i++) {
                    int64_t v = op->ia[2 + k * nd + i];
                    if (v < 0 || v >= nd || seen[k][v]++) return bad(p, "matmul: bad permutation");
                }
            for (int i = 0; i < nd; i++) {
                pa[i] = T(0)->dims[op->ia[2 + i]];
                pb[i] = T(1)->dims[op->ia[2 + nd + i]];
            }
            a = pa;
            b = pb;
            /* the product's dims: y's dims at the inverse permutation */
            for (int j = 0; j < nd; j++) py[op->ia[2 + 2 * nd + j]] = o->dims[j];
            if (op->npost) return bad(p, "matmul: post-ops with permutations");
        }
        const int64_t *od = op->ni > 2 ? py : o->dims;
        int64_t M = op->ia[0] ? a[nd - 1] : a[nd - 2], K = op->ia[0] ? a[nd - 2] : a[nd - 1];
        int64_t K2 = op->ia[1] ? b[nd - 1] : b[nd - 2], N = op->ia[1] ? b[nd - 2] : b[nd - 1];
        if (K != K2 || od[nd - 2] != M || od[nd - 1] != N) return bad(p, "matmul inner dims");
        for (int i = 0; i < nd - 2; i++) {
            int64_t m = a[i] > b[i] ? a[i] : b[i];
            if ((a[i] != m && a[i] != 1) || (b[i] != m && b[i] != 1) || od[i] != m) return bad(p, "matmul batch dims");
        }
        if (op->nin == 3) {
            const idk_tensor_t *c = T(2);
            if (c->ndims != nd) return bad(p, "matmul bias rank");
            for (int i = 0; i < nd; i++)
                if (c->dims[i] != 1 && (i < nd - 2 || c->dims[i] != od[i])) return bad(p, "matmul bias dims");
        }
        return IDK_OK;
    }
    case IDK_OP_BNORM:
        if (op->nin != 5 || op->nout != 1 || op->nf < 1 || op->nf > 2 || !same_dims(T(0), o) || T(0)->ndims < 2) return bad(p, "bnorm");
        for (int i = 1; i < 5; i++)
            if (T(i)->ndims != 1 || T(i)->dims[0] != o->dims[1]) return bad(p, "bnorm parameter shape");
        return IDK_OK;
    case IDK_OP_CONCAT: {
        if (op->nin < 1 || op->nout != 1 || op->ni != 1) return bad(p, "concat");
        int64_t ax = op->ia[0], sum = 0;
        if (ax < 0 || ax >= o->ndims) return bad(p, "concat axis");
        for (int k = 0; k < op->nin; k++) {
            const idk_tensor_t *x = T(k);
            if (x->ndims != o->ndims || x->dtype != o->dtype) return bad(p, "concat input rank/type");
            for (int i = 0; i < o->ndims; i++)
                if (i != ax && x->dims[i] != o->dims[i]) return bad(p, "concat input dims");
            sum += x->dims[ax];
        }
        if (sum != o->dims[ax]) return bad(p, "concat output dims");
        return IDK_OK;
    }
    case IDK_OP_DROPOUT:
        if (op->nin != 1 || op->nout != 1 || op->nf != 1 || !same_dims(T(0), o) || !f32 || !(op->fa[0] >= 0) ||
            !(op->fa[0] < 1))
            return bad(p, "dropout takes x and a ratio in [0, 1)");
        return IDK_OK;
    case IDK_OP_RESHAPE:
    case IDK_OP_COPY:
        if (op->nin != 1 || op->nout != 1 || idk_tensor_volume(T(0)) != idk_tensor_volume(o) || T(0)->dtype != o->dtype)
            return bad(p, "reshape/copy volume or type");
        if (op->kind == IDK_OP_COPY && !same_dims(T(0), o)) return bad(p, "copy dims");
        return IDK_OK;
    case IDK_OP_TRANSPOSE: {
        if (op->nin != 1 || op->nout != 1 || op->ni != o->ndims || T(0)->ndims != o->ndims || T(0)->dtype != o->dtype)
            return bad(p, "transpose");
        int seen[IDK_MAX_DIMS] = {0};
        for (int i = 0; i < o->ndims; i++) {
            int64_t q = op->ia[i];
            if (q < 0 || q >= o->ndims || seen[q]++ || o->dims[i] != T(0)->dims[q]) return bad(p, "transpose perm");
        }
        return IDK_OK;
    }
    case IDK_OP_SOFTMAX:
        if (op->nin != 1 || op->nout != 1 || op->ni != 2 || !same_dims(T(0), o) || op->ia[0] < 0 ||
            op->ia[0] >= (o->ndims ? o->ndims : 1))
            return bad(p, "softmax");
        return IDK_OK;
    case IDK_OP_LRN:
        if (op->nin != 1 || op->nout != 1 || op->ni != 1 || op->nf != 3 || !same_dims(T(0), o) || op->ia[0] < 1 ||
            o->ndims < 3)
            return bad(p, "lrn");
        return IDK_OK;
    case IDK_OP_PAD:
        if (op->nin != 1 || op->nout != 1 || op->ni != 2 * o->ndims || op->nf != 1 || T(0)->ndims != o->ndims ||
            T(0)->dtype != o->dtype)
            return bad(p, "pad");
        for (int i = 0; i < o->ndims; i++)
            if (T(0)->dims[i] + op->ia[i] + op->ia[o->ndims + i] != o->dims[i]) return bad(p, "pad output dims");
        return IDK_OK;
    case IDK_OP_GATHER: {
        if (op->nin != 2 || op->nout != 1 || op->ni != 1 || T(1)->dtype != IDK_I64 || T(0)->dtype != o->dtype)
            return bad(p, "gather takes data, int64 indices, axis");
        const idk_tensor_t *d = T(0), *ix = T(1);
        int64_t ax = op->ia[0];
        if (ax < 0 || ax >= d->ndims || o->ndims != d->ndims - 1 + ix->ndims) return bad(p, "gather axis/rank");
        for (int i = 0, j = 0; i < d->ndims; i++) {
            if (i == ax) {
                for (int k = 0; k < ix->ndims; k++)
                    if (o->dims[j++] != ix->dims[k]) return bad(p, "gather output dims");
            } else if (o->dims[j++] != d->dims[i]) {
                return bad(p, "gather output dims");
            }
        }
        return IDK_OK;
    }
    case IDK_OP_SLICE:
        if (op->nin != 1 || op->nout != 1 || op->ni != 2 * o->ndims || T(0)->ndims != o->ndims || T(0)->dtype != o->dtype)
            return bad(p, "slice");
        for (int i = 0; i < o->ndims; i++) {
            int64_t st = op->ia[i], sp = op->ia[o->ndims + i], n = o->dims[i];
            if (sp == 0) return bad(p, "slice step 0");
            if (n == 0) continue;
            int64_t last = st + (n - 1) * sp;
            if (st < 0 || st >= T(0)->dims[i] || last < 0 || last >= T(0)->dims[i]) return bad(p, "slice range");
        }
        return IDK_OK;
    case IDK_OP_REDUCE_MEAN:
        if (op->nin != 1 || op->nout != 1 || T(0)->ndims != o->ndims || !f32) return bad(p, "reduce_mean");
        for (int i = 0; i < o->ndims; i++)
            if (o->dims[i] != 1 && o->dims[i] != T(0)->dims[i]) return bad(p, "reduce_mean dims");
        return IDK_OK;
    case IDK_OP_CAST:
        if (op->nin != 1 || op->nout != 1 || op->ni != 1 || !same_dims(T(0), o) ||
            (T(0)->dtype != IDK_F32 && T(0)->dtype != IDK_I64) || (o->dtype != IDK_F32 && o->dtype != IDK_I64) ||
            op->ia[0] < IDK_CAST_PLAIN || op->ia[0] > IDK_CAST_U8 ||
            (op->ia[0] > IDK_CAST_BOOL && o->dtype != IDK_I64))
            return bad(p, "cast takes x, to (idk_cast_to_t; narrow integer targets write i64)");
        return IDK_OK;
    case IDK_OP_COMPARE:
    case IDK_OP_WHERE:
    case IDK_OP_EXPAND: {
        int n = op->kind == IDK_OP_WHERE ? 3 : op->kind == IDK_OP_COMPARE ? 2 : 1;
        if (op->nin != n || op->nout != 1) return bad(p, "compare/where/expand arity");
        if (op->kind == IDK_OP_COMPARE &&
            (op->ni != 1 || op->ia[0] < 0 || op->ia[0] > IDK_CMP_XOR || o->dtype != IDK_I64 || T(0)->dtype != T(1)->dtype))
            return bad(p, "compare takes a, b of one type, alg; writes i64");
        if (op->kind == IDK_OP_WHERE && (T(0)->dtype != IDK_I64 || T(1)->dtype != o->dtype || T(2)->dtype != o->dtype))
            return bad(p, "where takes an i64 condition and two inputs of the output's type");
        if (op->kind == IDK_OP_EXPAND && T(0)->dtype != o->dtype) return bad(p, "expand type");
        for (int k = 0; k < n; k++) {
            const idk_tensor_t *x = T(k);
            if (x->ndims > o->ndims) return bad(p, "input rank above output rank");
            for (int i = 0; i < x->ndims; i++) {
                int64_t d = x->dims[x->ndims - 1 - i], od = o->dims[o->ndims - 1 - i];
                if (d != od && d != 1) return bad(p, "shapes do not broadcast to the output");
            }
        }
        return IDK_OK;
    }
    case IDK_OP_CUMSUM:
        if (op->nin != 1 || op->nout != 1 || op->ni != 3 || !same_dims(T(0), o) || T(0)->dtype != o->dtype ||
            op->ia[0] < 0 || op->ia[0] >= (o->ndims ? o->ndims : 1) || o->ndims == 0)
            return bad(p, "cumsum takes x, axis, exclusive, reverse");
        return IDK_OK;
    case IDK_OP_UNARY: {
        if (op->nin != 1 || op->nout != 1 || op->ni != 1 || !same_dims(T(0), o) || T(0)->dtype != o->dtype)
            return bad(p, "unary takes x, alg");
        int64_t a = op->ia[0];
        int fonly = a == IDK_UN_ERF || a == IDK_UN_FLOOR || a == IDK_UN_CEIL;
        if (a < 0 || a > IDK_UN_SIGN || (fonly && !f32) || (a == IDK_UN_NOT && f32)) return bad(p, "unary alg/type");
        return IDK_OK;
    }
    case IDK_OP_LAYER_NORM: {
        const idk_tensor_t *x = T(0);
        if (op->nin < 2 || op->nin > 3 || op->nout < 1 || op->nout > 3 || op->ni != 1 || op->nf != 1 ||
            !same_dims(x, o) || !f32 || op->ia[0] < 0 || op->ia[0] >= x->ndims)
            return bad(p, "layer_norm takes x, scale, [bias], axis, epsilon");
        int ax = (int)op->ia[0];
        for (int k = 1; k < op->nout; k++) {
            const idk_tensor_t *st = &p->t[op->out[k]];
            if (st->dtype != IDK_F32 || st->ndims != x->ndims) return bad(p, "layer_norm statistics rank/type");
            for (int i = 0; i < x->ndims; i++)
                if (st->dims[i] != (i < ax ? x->dims[i] : 1)) return bad(p, "layer_norm statistics dims");
        }
        for (int k = 1; k < op->nin; k++) {
            const idk_tensor_t *w = T(k);
            if (w->ndims != x->ndims - ax) return bad(p, "layer_norm scale/bias rank");
            for (int i = 0; i < w->ndims; i++)
                if (w->dims[i] != x->dims[ax + i]) return bad(p, "layer_norm scale/bias dims");
        }
        return IDK_OK;
    }
    case IDK_OP_REDUCE:
        if (op->nin != 1 || op->nout != 1 || op->ni != 1 || T(0)->ndims != o->ndims || !f32 || op->ia[0] < 0 ||
            op->ia[0] > IDK_RED_PROD)
            return bad(p, "reduce takes x, alg");
        for (int i = 0; i < o->ndims; i++)
            if (o->dims[i] != 1 && o->dims[i] != T(0)->dims[i]) return bad(p, "reduce dims");
        return IDK_OK;
    case IDK_OP_ARGMAX: {
        const idk_tensor_t *x = T(0);
        if (op->nin != 1 || op->nout != 1 || op->ni != 3 || x->dtype != IDK_F32 || o->dtype != IDK_I64 ||
            o->ndims != x->ndims || op->ia[0] < 0 || op->ia[0] >= x->ndims || x->dims[op->ia[0]] == 0)
            return bad(p, "argmax takes f32 x, axis, select_last_index, is_min; writes i64");
        for (int i = 0; i < o->ndims; i++)
            if (o->dims[i] != (i == op->ia[0] ? 1 : x->dims[i])) return bad(p, "argmax dims");
        return IDK_OK;
    }
    case IDK_OP_TOPK:
    case IDK_OP_RESIZE:
    case IDK_OP_MASKED_SOFTMAX: return idk_check_modern(p, op);
    case IDK_OP_ATTENTION: return idk_check_attention(p, op);
    }
    return bad(p, "unknown op kind");
}

/* ---- helpers ---- */

static idk_status_t dnnl_err(idk_plan_t *p, const char *what, dnnl_status_t s) {
    return idk_fail(p, IDK_ERR_DNNL, "op %d: %s: %s", p->cur_op, what, dnnl_status2str(s));
}

static void any_md_dt(dnnl_memory_desc_t *md, const idk_tensor_t *t, dnnl_data_type_t dt) {
    dnnl_dims_t d;
    int nd = t->ndims ? t->ndims : 1;
    for (int i = 0; i < nd; i++) d[i] = t->ndims ? t->dims[i] : 1;
    dnnl_memory_desc_init_by_tag(md, nd, d, dt, dnnl_format_tag_any);
}


/* compute_dt is the data type of a plan's convolution and matmul operands (idk_plan_set_precision). */
static dnnl_data_type_t compute_dt(const idk_plan_t *p) { return p->prec == IDK_BF16 ? dnnl_bf16 : dnnl_f32; }

static void dims_md(dnnl_memory_desc_t *md, int nd, const int64_t *dims) { idk_plain_md(md, nd, dims); }

static dnnl_primitive_attr_t new_attr(void) {
    dnnl_primitive_attr_t a = NULL;
    dnnl_primitive_attr_create(&a);
    if (a) dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user);
    return a;
}

/* finish_prim creates the primitive of pd into a new step with its scratchpad argument. */
static idk_status_t finish_prim(idk_plan_t *p, dnnl_primitive_desc_t pd, idk_step_t **out) {
    idk_step_t *s = idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    dnnl_status_t ds = dnnl_primitive_create(&s->prim, pd);
    if (ds != dnnl_success) {
        s->prim = NULL;
        return dnnl_err(p, "primitive create", ds);
    }
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp && dnnl_memory_desc_get_size(sp) > 0) idk_step_arg(s, DNNL_ARG_SCRATCHPAD, sp, -1);
    *out = s;
    return IDK_OK;
}

/* first_view makes md a view of tensor tid's plain buffer, the first one, so that later
 * reorders into a primitive's layout start from it (grouped weights seen as oneDNN's
 * (g, O/g, I/g, k...)). 0 on success, -1 if the tensor has no plain buffer or no room. */
static int first_view(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md) {
    int pbuf;
    if (idk_get_plain(p, tid, &pbuf) != 0) return -1;
    idk_tensor_t *wt = &p->t[tid];
    for (int v = 0; v < wt->nviews; v++)
        if (dnnl_memory_desc_equal(&wt->views[v].md, md)) return 0;
    if (wt->nviews >= IDK_MAX_VIEWS) return -1;
    for (int v = wt->nviews; v > 0; v--) wt->views[v] = wt->views[v - 1];
    wt->views[0] = (idk_view_t){*md, 0, pbuf};
    wt->nviews++;
    return 0;
}

static int new_out(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md) {
    size_t sz = md ? dnnl_memory_desc_get_size(md) : p->t[tid].nbytes;
    int b = idk_new_buffer(p, sz);
    if (b < 0) return -1;
    dnnl_memory_desc_t pm;
    idk_plain_md(&pm, p->t[tid].ndims, p->t[tid].dims);
    int plain = !md || dnnl_memory_desc_equal(&pm, md);
    if (idk_set_output(p, tid, md, plain, b) != 0) return -1;
    return b;
}

/* pd_is_ref reports whether oneDNN implements pd with its reference kernel (plain C loops,
 * 10-100x slower than its jit ones): the caller then tries another layout. */
static int pd_is_ref(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
           strncmp(impl, "ref", 3) == 0;
}

static void eltwise_alg(int alg, float a, float b, dnnl_alg_kind_t *k, float *al, float *be) {
    *al = 0;
    *be = 0;
    switch (alg) {
    case IDK_ELT_RELU: *k = dnnl_eltwise_relu; *al = a; break;
    case IDK_ELT_CLIP: *k = dnnl_eltwise_clip; *al = a; *be = b; break;
    case IDK_ELT_SIGMOID: *k = dnnl_eltwise_logistic; break;
    case IDK_ELT_TANH: *k = dnnl_eltwise_tanh; break;
    case IDK_ELT_ELU: *k = dnnl_eltwise_elu; *al = a; break;
    case IDK_ELT_HARD_SWISH: *k = dnnl_eltwise_hardswish; break;
    case IDK_ELT_SQRT: *k = dnnl_eltwise_sqrt; break;
    case IDK_ELT_EXP: *k = dnnl_eltwise_exp; break;
    case IDK_ELT_LOG: *k = dnnl_eltwise_log; break;
    case IDK_ELT_GELU_ERF: *k = dnnl_eltwise_gelu_erf; break;
    case IDK_ELT_GELU_TANH: *k = dnnl_eltwise_gelu_tanh; break;
    case IDK_ELT_POW: *k = dnnl_eltwise_pow; *al = a; *be = b; break;
    case IDK_ELT_SWISH: *k = dnnl_eltwise_swish; *al = a; break;
    case IDK_ELT_MISH: *k = dnnl_eltwise_mish; break;
    case IDK_ELT_SOFTPLUS: *k = dnnl_eltwise_soft_relu; break;
    case IDK_ELT_ROUND: *k = dnnl_eltwise_round; break;
    default: *k = dnnl_eltwise_linear; *al = a; *be = b; break; /* LINEAR; HARD_SIGMOID's first half */
    }
}

static dnnl_status_t append_eltwise(dnnl_post_ops_t po, int alg, float a, float b) {
    dnnl_alg_kind_t k;
    float al, be;
    eltwise_alg(alg, a, b, &k, &al, &be);
    dnnl_status_t s = dnnl_post_ops_append_eltwise(po, 1.0f, k, al, be);
    if (s == dnnl_success && alg == IDK_ELT_HARD_SIGMOID) s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, 0.f, 1.f);
    return s;
}

static idk_status_t fn_zero(idk_plan_t *p, idk_step_t *s) {
    if (s->bytes) memset(idk_buf_ptr(p, s->bufs[1]), 0, s->bytes);
    return IDK_OK;
}

static idk_status_t fn_copy(idk_plan_t *p, idk_step_t *s) {
    if (s->bytes) memcpy(idk_buf_ptr(p, s->bufs[1]), idk_buf_ptr(p, s->bufs[0]), s->bytes);
    return IDK_OK;
}

/* buf_live_elsewhere: buffer b holds another tensor still to be read (at or after the op
 * being lowered) or a graph input/output. Tensors already dead there do not count: a
 * matmul's residual operand is a reshape of the residual stream (a view of its buffer) that
 * is dead once reshaped, and a residual block's output written in place over its summand
 * shares that dead summand's buffer, which the next block's sum may overwrite in turn (the
 * earlier any-other-view test copied every other ResNet block's residual stream first).
 * A buffer sharing bytes with b counts too: b may be an input's range of an in-place
 * concatenation still to be read (concat_in_place). */
static int buf_live_elsewhere(idk_plan_t *p, int tid, int b) {
    for (int i = 0; i < p->nt; i++) {
        const idk_tensor_t *t = &p->t[i];
        if (i == tid || (t->lastuse < p->cur_op && !t->is_out && !t->is_in && !t->cdata)) continue;
        for (int v = 0; v < t->nviews; v++)
            if (idk_bufs_overlap(p, t->views[v].buf, b)) return 1;
    }
    return 0;
}

/* post_ops builds the attribute for an op's post-ops and returns the buffer the
 * output must be written to (the sum tensor's, in place when it dies here). */
static idk_status_t with_post_ops(idk_plan_t *p, const idk_op_t *op, dnnl_primitive_attr_t attr, int *sum_tid) {
    dnnl_post_ops_t po;
    *sum_tid = -1;
    if (op->npost == 0) return IDK_OK;
    if (dnnl_post_ops_create(&po) != dnnl_success) return IDK_ERR_NOMEM;
    for (int i = 0; i < op->npost; i++) {
        const idk_post_t *q = &op->post[i];
        dnnl_status_t s;
        if (q->kind == IDK_POST_SUM) {
            if (*sum_tid >= 0) {
                dnnl_post_ops_destroy(po);
                return idk_fail(p, IDK_ERR_UNSUPPORTED, "op %d: more than one sum post-op", p->cur_op);
            }
            *sum_tid = q->tensor;
            /* alg 1, 2 (int8 convolutions, quant.c): the summand holds u8 or s8 values,
             * added as alpha * (value - beta); 3: the output's type, added times alpha */
            static const dnnl_data_type_t sdt[4] = {dnnl_data_type_undef, dnnl_u8, dnnl_s8, dnnl_data_type_undef};
            s = q->alg <= 0 || q->alg > 3 ? dnnl_post_ops_append_sum(po, 1.0f)
                                          : dnnl_post_ops_append_sum_v3(po, q->alpha, (int32_t)q->beta, sdt[q->alg]);
        } else {
            s = append_eltwise(po, q->alg, q->alpha, q->beta);
        }
        if (s != dnnl_success) {
            dnnl_post_ops_destroy(po);
            return dnnl_err(p, "post-op", s);
        }
    }
    dnnl_status_t s = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_post_ops_destroy(po);
    return s == dnnl_success ? IDK_OK : dnnl_err(p, "set post-ops", s);
}

/* dst_for_sum picks the destination buffer for an op whose output gets a sum post-op. */
static int dst_for_sum(idk_plan_t *p, const idk_op_t *op, int sum_tid, const dnnl_memory_desc_t *dmd) {
    int rb;
    if (idk_get_view(p, sum_tid, dmd, &rb) != 0) return -1;
    idk_tensor_t *r = &p->t[sum_tid];
    int inplace = r->lastuse == p->cur_op && !r->is_out && !r->is_in && !r->cdata && !buf_live_elsewhere(p, sum_tid, rb);
    for (int i = 0; i < op->nin; i++)
        if (op->in[i] == sum_tid) inplace = 0;
    if (inplace) {
        if (idk_set_output(p, op->out[0], dmd, 0, rb) != 0) return -1;
        /* safe: this op is the summand's last reader, so overwriting it loses nothing */
        return rb;
    }
    int b = new_out(p, op->out[0], dmd);
    if (b < 0) return -1;
    idk_step_t *s = idk_new_step(p);
    if (!s) return -1;
    s->fn = fn_copy;
    s->nb = 2;
    s->bufs[0] = rb;
    s->bufs[1] = b;
    s->bytes = dnnl_memory_desc_get_size(dmd);
    return b;
}

/* fn_block_reorder copies an N x C x H x W tensor between two channel-blocked layouts
 * (nChw16c, nChw8c, nChw4c): each pixel's block of the larger size is whole blocks of the
 * smaller, so the copy moves the smaller block's floats at a time; small blocks past the
 * channels the other layout holds are dropped or zero-filled (its padding). n1 = N, n2 =
 * the large blocks per image, n3 = H*W; extra = {large block, small block, small blocks per
 * image}; alg: 1 when the source has the large blocks. Pixels split across the plan's
 * threads (pure copies: any split gives the same bytes). */
static idk_status_t fn_block_reorder(idk_plan_t *p, idk_step_t *s) {
    const float *src = idk_buf_ptr(p, s->bufs[0]);
    float *dst = idk_buf_ptr(p, s->bufs[1]);
    int64_t n = s->n1, cl = s->n2, hw = s->n3, bl = s->extra[0], bs = s->extra[1], cs = s->extra[2];
    int64_t per = bl / bs;
    int fromlarge = s->alg;
    int64_t rows = n * cl, chunk = hw < 64 ? hw : 64, nchunk = (hw + chunk - 1) / chunk;
    int nth = rows * hw * bl >= 16384 && p->threads > 1 ? p->threads : 1;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t r = 0; r < rows * nchunk; r++) {
        int64_t row = r / nchunk, i0 = r % nchunk * chunk, i1 = i0 + chunk < hw ? i0 + chunk : hw;
        int64_t b = row % cl, img = row / cl;
        float *large = (float *)(fromlarge ? src : dst) + (img * cl + b) * hw * bl;
        float *small = (float *)(fromlarge ? dst : src) + (img * cs + b * per) * hw * bs;
        for (int64_t j = 0; j < per; j++) {
            int have = b * per + j < cs;
            float *sm = small + j * hw * bs;
            for (int64_t i = i0; i < i1; i++) {
                if (fromlarge) {
                    if (have) memcpy(sm + i * bs, large + i * bl + j * bs, (size_t)bs * 4);
                } else if (have) {
                    memcpy(large + i * bl + j * bs, sm + i * bs, (size_t)bs * 4);
                } else {
                    memset(large + i * bl + j * bs, 0, (size_t)bs * 4);
                }
            }
        }
    }
    return IDK_OK;
}

/* idk_block_reorder adds fn_block_reorder for a run-time reorder between two of nChw16c,
 * nChw8c and nChw4c (f32, 4-D): oneDNN's jit reorder moves about 8 GB/s there at batch 1
 * (RegNet's grouped convolutions of 8 channels a group run on nChw8c, ResNeXt's first
 * stage's of 4 on nChw4c, between 1x1 convolutions on nChw16c: 1.3 ms of reorders in a
 * 7.6 ms RegNet-Y-400MF batch, per-primitive minimum sum). 1 if added, 0 if not its case,
 * -1 on error. */
int idk_block_reorder(idk_plan_t *p, const dnnl_memory_desc_t *src, int sb, const dnnl_memory_desc_t *dst, int db) {
    if (env_off("IDK_BLOCK_REORDER") || src->ndims != 4 || src->data_type != dnnl_f32 || dst->data_type != dnnl_f32)
        return 0;
    static const dnnl_format_tag_t tags[3] = {dnnl_nChw16c, dnnl_nChw8c, dnnl_nChw4c};
    static const int64_t sizes[3] = {16, 8, 4};
    int fs = -1, fd = -1;
    for (int i = 0; i < 3; i++) {
        dnnl_memory_desc_t m;
        dnnl_memory_desc_init_by_tag(&m, 4, src->dims, dnnl_f32, tags[i]);
        if (dnnl_memory_desc_equal(src, &m)) fs = i;
        if (dnnl_memory_desc_equal(dst, &m)) fd = i;
    }
    if (fs < 0 || fd < 0 || fs == fd) return 0;
    idk_step_t *s = idk_new_step(p);
    if (!s || !(s->extra = calloc(3, sizeof(int64_t)))) {
        idk_fail(p, IDK_ERR_NOMEM, "op %d: reorder step", p->cur_op);
        return -1;
    }
    int64_t c = src->dims[1], bl = sizes[fs < fd ? fs : fd], bs = sizes[fs < fd ? fd : fs];
    s->fn = fn_block_reorder;
    s->nb = 2;
    s->bufs[0] = sb;
    s->bufs[1] = db;
    s->n1 = src->dims[0];
    s->n2 = (c + bl - 1) / bl;
    s->n3 = src->dims[2] * src->dims[3];
    s->extra[0] = bl;
    s->extra[1] = bs;
    s->extra[2] = (c + bs - 1) / bs;
    s->alg = fs < fd; /* the source has the larger blocks */
    return 1;
}

/* idk_op_tiny: op is too small to split across threads (at most IDK_TINY_KFLOP thousand
 * floating-point operations, default 200, and IDK_TINY_KB kilobytes of non-constant inputs and
 * outputs, default 64): its steps run on one thread. At batch 1 a network's small layers
 * (the squeeze-and-excitation convolutions on 1x1 pixels, a few microseconds of work) each
 * wait for every thread at a barrier, and on a shared machine a descheduled thread stalls
 * every one of them; ONNX Runtime runs such ops on the calling thread. 300 such 1x1
 * convolutions on 1x1 pixels at batch 1, two threads, beside another 2-thread benchmark on 2
 * vCPUs (fastest / median run): 5 kflop each (26->104 channels) 0.49 / 21 ms -> 0.28 / 0.30 ms,
 * 100 kflop (112->448) 2.1 / 22.7 ms -> 3.0 / 3.5 ms, 387 kflop (440->440, reading 0.8 MB of
 * weights) 9.0 / 32 ms -> 13.9 / 15.1 ms: the bound keeps ops of up to ~100 kflop, slower by
 * 3 us in a quiet moment and 7x faster in a typical one. */
int idk_op_tiny(const idk_plan_t *p, const idk_op_t *op) {
    const char *ek = getenv("IDK_TINY_KFLOP"), *eb = getenv("IDK_TINY_KB");
    double maxflop = (ek ? atof(ek) : 200) * 1e3, maxbytes = (eb ? atof(eb) : 64) * 1024;
    if (p->threads == 1 || maxflop <= 0 || op->nout < 1) return 0;
    double bytes = 0, flop = 0;
    for (int i = 0; i < op->nin; i++)
        if (!p->t[op->in[i]].cdata) bytes += (double)p->t[op->in[i]].nbytes;
    for (int i = 0; i < op->nout; i++) bytes += (double)p->t[op->out[i]].nbytes;
    const idk_tensor_t *o = OUT;
    if ((op->kind == IDK_OP_CONV || op->kind == IDK_OP_QCONV) && op->nin >= 2) {
        const idk_tensor_t *w = T(1);
        double k = 1;
        for (int i = 1; i < w->ndims; i++) k *= (double)w->dims[i]; /* input channels a group x kernel */
        flop = 2 * (double)idk_tensor_volume(o) * k;
    } else if (op->kind == IDK_OP_MATMUL && op->nin >= 2 && T(0)->ndims >= 1) {
        flop = 2 * (double)idk_tensor_volume(o) * (double)T(0)->dims[T(0)->ndims - 1];
    } else if (op->kind == IDK_OP_ATTENTION && op->nin >= 3 && op->ni == 4 * o->ndims) {
        /* the two products, 2 S (L d + L dv) a batch-head: S is kt's last logical dim */
        double S = (double)T(1)->dims[op->ia[2 * o->ndims - 1]];
        flop = 2 * S * ((double)idk_tensor_volume(T(0)) + (double)idk_tensor_volume(o));
    }
    return flop <= maxflop && bytes <= maxbytes;
}

/* ---- ops ---- */

/* dw_fusable returns the op after op (a 1x1 convolution being lowered) when oneDNN can run
 * the two as one primitive, a depthwise post-op on the 1x1 convolution: a 3x3 depthwise
 * convolution of stride 1 or 2 and padding 1 that alone reads op's output, with constant
 * weights and bias and eltwise post-ops only (MobileNetV2's expansion and depthwise pairs,
 * some of MnasNet's). Otherwise NULL. */
static const idk_op_t *dw_fusable(idk_plan_t *p, const idk_op_t *op) {
    int ni = p->cur_op + 1;
    if (env_off("IDK_DW_FUSE") || ni >= p->nops || op->nout != 1) return NULL;
    for (int i = 0; i < op->npost; i++)
        if (op->post[i].kind == IDK_POST_SUM) return NULL;
    const idk_op_t *d = &p->ops[ni];
    const idk_tensor_t *mid = &p->t[op->out[0]];
    if (d->kind != IDK_OP_CONV || d->nin != 3 || d->nout != 1 || d->in[0] != op->out[0] || d->ni != 10 ||
        d->ia[0] != 2)
        return NULL;
    if (mid->lastuse != ni || mid->is_out || mid->ndims != 4) return NULL;
    const idk_tensor_t *w = &p->t[d->in[1]], *b = &p->t[d->in[2]], *o = &p->t[d->out[0]];
    int64_t C = mid->dims[1], s = d->ia[1];
    /* ia: spatial rank, strides, dilations, pads begin, pads end, group */
    if (d->ia[9] != C || w->dims[0] != C || w->dims[1] != 1 || w->dims[2] != 3 || w->dims[3] != 3 || !w->cdata ||
        !b->cdata)
        return NULL;
    if ((s != 1 && s != 2) || d->ia[2] != s || d->ia[3] != 1 || d->ia[4] != 1) return NULL;
    for (int i = 5; i < 9; i++)
        if (d->ia[i] != 1) return NULL;
    if (o->dims[2] != (mid->dims[2] + s - 1) / s || o->dims[3] != (mid->dims[3] + s - 1) / s) return NULL;
    for (int i = 0; i < d->npost; i++)
        if (d->post[i].kind == IDK_POST_SUM) return NULL;
    return d;
}

/* lower_conv_dw lowers a 1x1 convolution (op: stride 1, no padding, fp32, nChw16c) and the
 * depthwise convolution d after it (dw_fusable) as one oneDNN primitive: the expanded
 * tensor between them never goes to memory, which is what these layers wait for at batch 8
 * (1x1 16->96 then 3x3/2 depthwise at 112x112, batch 8, 2 threads, standalone: 3.55 ms as
 * two primitives, 1.96 fused; 24->144 then 3x3/1 at 56x56: 1.68 against 1.52). oneDNN 2.6
 * has a jit kernel for the pair only where it can split the rows of several images between
 * the threads; elsewhere (batch 1) it offers its ref_fused_convolution, which runs the two
 * kernels in turn and was no faster, so then this returns IDK_ERR_UNSUPPORTED having added
 * nothing and the two are lowered separately. */
static idk_status_t lower_conv_dw(idk_plan_t *p, const idk_op_t *op, const idk_op_t *d, const dnnl_memory_desc_t *src,
                                  const dnnl_memory_desc_t *dst) {
    const idk_tensor_t *w = T(1);
    dnnl_memory_desc_t wei, bias;
    dnnl_dims_t wdd = {w->dims[0], w->dims[1], 1, 1}, one = {1, 1}, zero = {0, 0};
    dnnl_memory_desc_init_by_tag(&wei, 4, wdd, dnnl_f32, dnnl_format_tag_any);
    int has_bias = op->nin == 3;
    if (has_bias) dims_md(&bias, 1, &OUT->dims[1]);
    dnnl_convolution_desc_t cd;
    if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, src, &wei,
                                           has_bias ? &bias : NULL, dst, one, zero, zero) != dnnl_success)
        return IDK_ERR_UNSUPPORTED;
    dnnl_post_ops_t po;
    if (dnnl_post_ops_create(&po) != dnnl_success) return IDK_ERR_NOMEM;
    dnnl_status_t ds = dnnl_success;
    for (int i = 0; i < op->npost && ds == dnnl_success; i++)
        ds = append_eltwise(po, op->post[i].alg, op->post[i].alpha, op->post[i].beta);
    if (ds == dnnl_success)
        ds = d->ia[1] == 1 ? dnnl_post_ops_append_dw_k3s1p1(po, dnnl_f32, dnnl_f32, dnnl_f32, 0, 0, NULL)
                           : dnnl_post_ops_append_dw_k3s2p1(po, dnnl_f32, dnnl_f32, dnnl_f32, 0, 0, NULL);
    for (int i = 0; i < d->npost && ds == dnnl_success; i++)
        ds = append_eltwise(po, d->post[i].alg, d->post[i].alpha, d->post[i].beta);
    dnnl_primitive_attr_t attr = new_attr();
    if (ds == dnnl_success) ds = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_desc_t pd = NULL;
    if (ds == dnnl_success) ds = dnnl_primitive_desc_create(&pd, &cd, attr, p->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return IDK_ERR_UNSUPPORTED;
    if (pd_is_ref(pd)) {
        dnnl_primitive_desc_destroy(pd);
        return IDK_ERR_UNSUPPORTED;
    }
    dnnl_memory_desc_t smd = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    dnnl_memory_desc_t wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_desc_t dmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    dnnl_memory_desc_t dwmd =
        *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS);
    dnnl_memory_desc_t dbmd =
        *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS);
    idk_status_t rc = IDK_ERR_DNNL;
    int sb, wb, bb = -1, dwb, dbb, db;
    if (idk_get_view(p, op->in[0], &smd, &sb) != 0 || idk_get_view(p, op->in[1], &wmd, &wb) != 0) goto out;
    if (has_bias && idk_get_plain(p, op->in[2], &bb) != 0) goto out;
    {
        /* the depthwise weights (C, 1, 3, 3) viewed as oneDNN's grouped (C, 1, 1, 3, 3) first,
         * as lower_conv does, so the reorder into the primitive's layout starts from it */
        int64_t gd[5] = {p->t[d->in[1]].dims[0], 1, 1, 3, 3};
        dnnl_memory_desc_t gm;
        dims_md(&gm, 5, gd);
        if (first_view(p, d->in[1], &gm) != 0) goto out;
    }
    if (idk_get_view(p, d->in[1], &dwmd, &dwb) != 0 || idk_get_view(p, d->in[2], &dbmd, &dbb) != 0) goto out;
    if ((db = new_out(p, d->out[0], &dmd)) < 0) goto out;
    idk_step_t *s;
    if ((rc = finish_prim(p, pd, &s)) != IDK_OK) goto out;
    idk_step_arg(s, DNNL_ARG_SRC, &smd, sb);
    idk_step_arg(s, DNNL_ARG_WEIGHTS, &wmd, wb);
    if (has_bias) idk_step_arg(s, DNNL_ARG_BIAS, &bias, bb);
    idk_step_arg(s, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, &dwmd, dwb);
    idk_step_arg(s, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, &dbmd, dbb);
    idk_step_arg(s, DNNL_ARG_DST, &dmd, db);
    p->fused_next = 1;
    rc = IDK_OK;
out:
    dnnl_primitive_desc_destroy(pd);
    if (rc != IDK_OK && p->err[0] == 0) idk_fail(p, rc, "op %d: 1x1 and depthwise convolution lowering failed", p->cur_op);
    return rc;
}

/* wino_tiles_poor reports a dense 3x3 convolution (input x, output o) that oneDNN's
 * F(4x4,3x3) Winograd kernel (batch >= 2; batch 1 gets the F(2x2,3x3) one) would block badly:
 * that kernel's register block of tiles is a divisor, under its 32 registers, of the tile
 * count N * ceil(OH/4) * ceil(OW/4), and where the largest one is under 12 (145 to 148 output
 * pixels a side: 37 tiles, a prime, so 4 at batch 4 and 8 at batch 8) it runs at about half
 * speed. With at most 32 input channels brgconv on nhwc is then faster (batch 4 on one
 * thread, per-primitive minimum ms, Winograd against brgconv: Inception-v3's stem 32->32 at
 * 147x147 23.5 against 14.1, 32->64 30.6 against 18.5, 16->32 9.8 against 5.8; with 64 or 128
 * input channels Winograd still wins or ties, and at 23, 29 or 31 prime tiles a side,
 * divisors 23 to 31, it stays 1.2-1.25x faster than brgconv). IDK_WINO_TILES=0 turns the
 * check off. */
static int wino_f4_blocks_poorly(const idk_tensor_t *o) {
    int64_t tiles = o->dims[0] * ((o->dims[2] + 3) / 4) * ((o->dims[3] + 3) / 4), best = 1;
    for (int64_t d = 1; d < 32; d++)
        if (tiles % d == 0) best = d;
    return best < 12;
}

static int wino_tiles_poor(const idk_tensor_t *x, const idk_tensor_t *o) {
    if (env_off("IDK_WINO_TILES") || x->ndims != 4 || x->dims[0] < 2 || x->dims[1] > 32) return 0;
    return wino_f4_blocks_poorly(o);
}

/* wino_f2_blocks_poorly reports a Winograd primitive that is oneDNN's F(2x2,3x3) kernel (what
 * it gives batch 1 under 160 channels) having blocked itself poorly: its blocking search
 * (the batch-1 path scores candidate tile blocks by thread balance and L2 fit) sometimes
 * settles on one 16-channel output block per GEMM chunk, which its weights' layout shows
 * (wino_desc.oc2_block 1; 2 to 6 otherwise), and then runs at about half speed: in every
 * shape measured oc2_block 1 went with the slow runs, 2-6 with the fast ones. Per-primitive minimum ms at batch 1 on two threads (a scratch oneDNN driver,
 * 2026-11-28, load 2-3), F(2x2) / F(4x4) / brgconv on nhwc, input -> output channels at
 * the output size:
 *   oc2_block 1: Inception-v3's 80->192 at 71x71 4.6 / 2.4 / 4.2, 96->96 3.4 / 1.9 / 2.5,
 *   64->192 5.0 / 2.4, 128->128 5.8 / 3.0 / 4.3, 128->32 1.85 / 1.00 / 1.13, at 112x112
 *   128->32 8.0 / 4.7; Inception-v3's 32->32 at 147x147 1.69 / 3.0 / 1.29, 16->32 and
 *   32->32 at 71x71 0.23 / - / 0.16 and 0.40 / - / 0.31;
 *   oc2_block 2-6 (every batch-1 Winograd convolution of ResNet-18/50, VGG-11, GoogLeNet,
 *   DenseNet-121 and Inception-v3's others): F(2x2) fastest, e.g. 64->64 at 56x56 0.41 /
 *   0.52 / 0.64, 32->64 at 147x147 1.54 / 5.4 / 2.30, 64->128 at 112x112 3.2-3.4 / 3.4 /
 *   5.6, 128->32 at 56x56 0.52-0.57 / 0.64 / 0.65.
 * lower_conv then takes the F(4x4) kernel where its tiles block well (wino_f4_blocks_poorly;
 * not at 147x147, 37 tiles a side) and a direct convolution otherwise. The search depends on
 * the machine's caches and the thread count, both fixed for a plan, so a plan's choice and
 * its bytes stay the same from run to run. IDK_WINO_F2CHECK=0 turns the check off. */
static int wino_f2_blocks_poorly(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (env_off("IDK_WINO_F2CHECK")) return 0;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
        !strstr(impl, "wino_2x3"))
        return 0;
    const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    return w && w->format_kind == dnnl_format_kind_wino && w->format_desc.wino_desc.oc2_block == 1;
}

/* wino_f4_pd returns the primitive descriptor of oneDNN's F(4x4,3x3) Winograd kernel for cd
 * and attr, or NULL where it has none. */
static dnnl_primitive_desc_t wino_f4_pd(idk_plan_t *p, const dnnl_convolution_desc_t *cd,
                                        const_dnnl_primitive_attr_t attr) {
    dnnl_primitive_desc_iterator_t it;
    if (dnnl_primitive_desc_iterator_create(&it, cd, attr, p->eng, NULL) != dnnl_success) return NULL;
    dnnl_primitive_desc_t found = NULL;
    do {
        dnnl_primitive_desc_t c = dnnl_primitive_desc_iterator_fetch(it);
        const char *impl = NULL;
        if (c && dnnl_primitive_desc_query(c, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
            strstr(impl, "wino_4x3")) {
            found = c;
            break;
        }
        if (c) dnnl_primitive_desc_destroy(c);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    return found;
}

/* wino_min_pixels is the fewest output pixels (a side squared) at which a dense 3x3
 * stride-1 convolution with input x runs Winograd:
 * - batch >= 2: one 4x4 tile (oneDNN takes F(4x4,3x3) there, which beats brgconv at every
 *   size down to 7x7; under a tile most of its outputs are thrown away);
 * - batch 1, in a network without depthwise convolutions: 14x14, and 7x7 from 512 input
 *   channels (F(2x2,3x3); the transforms cost O(C) a pixel, the products O(C^2), so under
 *   14x14 only wide layers gain);
 * - batch 1 with depthwise convolutions: 28x28 (the threshold also moves their depthwise
 *   and 1x1 layout rules, and EfficientNetV2-S lost with 14x14).
 * Measurements: benchmarks/README.md ("Winograd at every size at batch >= 2", "Winograd at
 * batch 1 from 14x14 up"). IDK_WINO_MIN (pixels) overrides all; IDK_WINO_BATCH=0 and
 * IDK_WINO_B1=0 keep 28x28 at batch >= 2 and at batch 1. */
static int64_t wino_min_pixels(const idk_plan_t *p, const idk_tensor_t *x) {
    const char *mw = getenv("IDK_WINO_MIN");
    if (mw) return atoll(mw);
    if (x->dims[0] >= 2 && !env_off("IDK_WINO_BATCH")) return 4 * 4;
    if (!p->depthwise && !env_off("IDK_WINO_B1")) return x->dims[1] >= 512 ? 7 * 7 : 14 * 14;
    return 28 * 28;
}

/* from_nhwc_stem reports whether tensor tid is the output of a 7x7 stem lowered on nhwc in a
 * network otherwise blocked (lower_conv), or of a pooling of it. ResNeXt-50 batch 1 (per-step
 * fastest, two threads, 2026-11-28): its stem takes 1.33 ms on nChw16c (the jit kernel, nchw
 * input) against about 0.75 on nhwc (brgconv, as GoogLeNet's same 7x7 runs); but where the
 * 1x1 convolutions after the max pool followed it onto nhwc, the blocks after them did too
 * and lost 0.4 ms (brgemm 1x1 slower than the nChw16c jit one at 14x14, nhwc<->nChw4c
 * reorders around the grouped convolutions). So they take nChw16c, reordering the pooled
 * 56x56x64 (0.8 MB) once. IDK_STEM_NHWC=0 keeps the stem on nChw16c. */
static int from_nhwc_stem(const idk_plan_t *p, int tid) {
    if (p->t[tid].nhwc_stem) return 1;
    for (int o = 0; o < p->nops; o++) {
        const idk_op_t *op = &p->ops[o];
        if (op->nout > 0 && op->out[0] == tid) return op->kind == IDK_OP_POOL && p->t[op->in[0]].nhwc_stem;
    }
    return 0;
}

/* is_tag: tensor tid (4-D) is stored first in layout tag of type dt. */
static int is_tag(idk_plan_t *p, int tid, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    const idk_tensor_t *t = &p->t[tid];
    idk_view_t *v;
    dnnl_memory_desc_t md;
    dnnl_dims_t d;
    if (t->ndims != 4 || idk_primary(p, tid, &v) != 0) return 0;
    for (int i = 0; i < 4; i++) d[i] = t->dims[i];
    dnnl_memory_desc_init_by_tag(&md, 4, d, dt, tag);
    return dnnl_memory_desc_equal(&v->md, &md);
}

/* is_nhwc: tensor tid is stored first in nhwc (a brgemm convolution's output), so a
 * convolution reading it in nhwc needs no reorder. */
static int is_nhwc(idk_plan_t *p, int tid, dnnl_data_type_t dt) { return is_tag(p, tid, dt, dnnl_nhwc); }

/* s2_blocked: a dense 3x3 stride-2 convolution at batch 1 with at least 14x14 outputs and
 * as many input as output channels reading an nChw16c tensor (a ResNet bottleneck's, first
 * in its stage, after the blocked Winograd stage before it) runs oneDNN's jit kernel on
 * nChw16c instead of brgconv on nhwc. On nhwc it cost a reorder of its input, put the 1x1
 * expansion after it on nhwc too, and the blocked projection shortcut then reordered that
 * expansion's output to sum into it: two reorders a stage. The jit kernel itself is slower
 * than brgconv at 7x7 outputs and on large convolutions (Wide ResNet-50-2's, 462M
 * multiply-adds: 3.3 -> 3.6-3.8 ms) by more than the reorders cost, so only up to 2^27
 * multiply-adds (ResNet-50's 116M); and ResNet-18's 64->128 and 128->256 ones, read by a
 * Winograd convolution and not a 1x1, lost 0.1 ms each (benchmarks/README.md, helper h12s).
 * Only for padded convolutions that halve the size (a ResNet's), where it was measured:
 * Inception-v3's unpadded 35x35 -> 17x17 ones keep brgconv, whose layout the blocks after
 * them follow. IDK_S2_BLOCKED=0 keeps brgconv. */
static int s2_blocked(idk_plan_t *p, const idk_op_t *op, const idk_tensor_t *x, const idk_tensor_t *w,
                      const idk_tensor_t *o, const dnnl_dims_t st, dnnl_data_type_t dt) {
    const int64_t *ia = op->ia; /* 2-D: strides ia[1..2], dilations ia[3..4], group ia[9] */
    int64_t macs = o->dims[1] * x->dims[1] * 9 * o->dims[2] * o->dims[3];
    return ia[9] == 1 && x->dims[0] == 1 && w->dims[2] == 3 && w->dims[3] == 3 && st[0] == 2 && st[1] == 2 &&
           ia[3] == 1 && ia[4] == 1 && x->dims[1] == o->dims[1] && x->dims[1] % 16 == 0 &&
           x->dims[2] == 2 * o->dims[2] && x->dims[3] == 2 * o->dims[3] && o->dims[2] * o->dims[3] >= 14 * 14 &&
           macs <= ((int64_t)1 << 27) && is_tag(p, op->in[0], dt, dnnl_nChw16c) && !env_off("IDK_S2_BLOCKED");
}

/* stem_blocked says whether a dense network's first convolution (fewer than 8 input
 * channels) reads its nchw input straight into nChw16c (oneDNN's jit kernel) instead of
 * brgconv on nhwc, which also costs a reorder of the input: a stride-1 stem (VGG's 3x3)
 * and an overlapping stride-4 one (AlexNet's 11x11), where the jit kernel is 8-27% faster
 * alone and the layers after them gain or stay level. Not a ResNet's, GoogLeNet's or
 * Inception-v3's stride-2 stems, where the convolutions after them lost what the stem
 * gained. IDK_STEM_BLOCKED=0 keeps brgconv. */
static int stem_blocked(const idk_tensor_t *w, const dnnl_dims_t st) {
    int s1 = st[0] == 1 && st[1] == 1, s4 = st[0] >= 4 && st[1] >= 4 && w->dims[2] > st[0] && w->dims[3] > st[1];
    return (s1 || s4) && !env_off("IDK_STEM_BLOCKED");
}

/* ---- grouped 3x3 convolutions of 4 or 8 channels a group, on nChw16c ---- */

/* GCONV_R: output pixels of a row held in registers at once. */
#define GCONV_R 8

/* gconv_row computes output pixels ow0 .. ow0 + R - 1 of row oh of one 16-channel block (xb:
 * the block's input planes, IH x IW x 16; wb: its weights, [kh][kw][j][16], lane l the block's
 * output channel l, j the input channel within its group; y: the output row). A lane's group
 * holds CG channels, lanes l - l % CG to l - l % CG + CG - 1 of the same block, so input
 * channel j of lane l's group is lane l - l % CG + j of the input vector: one permute
 * (idx[j]) gives all 16 lanes their operand, and each input column is permuted once for the
 * up to three taps that read it. Every output sums bias, then kh, kw, j in that order, whatever
 * thread computes it. S, CG, R and edge (columns may fall in the padding) are constants at
 * each call site below. */
static inline __attribute__((always_inline, target("avx512f"))) void
gconv_row(const float *xb, const float *wb, const __m512i *idx, __m512 bias, float *y, int64_t IH, int64_t IW,
          int64_t oh, int64_t ow0, const int S, const int CG, const int R, const int edge, int relu) {
    __m512 acc[GCONV_R];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = bias;
    for (int kh = 0; kh < 3; kh++) {
        int64_t ih = oh * S - 1 + kh;
        if (ih < 0 || ih >= IH) continue;
        const float *row = xb + ih * IW * 16;
        int64_t iw0 = ow0 * S - 1;
        const float *wk = wb + kh * 3 * CG * 16;
#pragma GCC unroll 32
        for (int c = 0; c < (R - 1) * S + 3; c++) {
            if (edge && (iw0 + c < 0 || iw0 + c >= IW)) continue;
            __m512 v = _mm512_loadu_ps(row + (iw0 + c) * 16);
#pragma GCC unroll 8
            for (int j = 0; j < CG; j++) {
                __m512 sj = _mm512_permutexvar_ps(idx[j], v);
#pragma GCC unroll 3
                for (int kw = 0; kw < 3; kw++) {
                    int d = c - kw;
                    if (d >= 0 && d % S == 0 && d / S < R)
                        acc[d / S] = _mm512_fmadd_ps(sj, _mm512_loadu_ps(wk + (kw * CG + j) * 16), acc[d / S]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(y + (ow0 + r) * 16, relu ? _mm512_max_ps(acc[r], _mm512_setzero_ps()) : acc[r]);
}

/* gconv_line computes one output row of one block, in register blocks of GCONV_R pixels and
 * a narrower last one. */
static inline __attribute__((always_inline, target("avx512f"))) void
gconv_line(const float *xb, const float *wb, const __m512i *idx, __m512 bias, float *y, int64_t IH, int64_t IW,
           int64_t OW, int64_t oh, const int S, const int CG, int relu) {
    int64_t ow0 = 0;
    for (; ow0 + GCONV_R <= OW; ow0 += GCONV_R) {
        /* interior blocks read no padding column */
        if (ow0 * S - 1 >= 0 && (ow0 + GCONV_R - 1) * S + 1 < IW)
            gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, GCONV_R, 0, relu);
        else
            gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, GCONV_R, 1, relu);
    }
    switch (OW - ow0) {
    case 1: gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, 1, 1, relu); break;
    case 2: gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, 2, 1, relu); break;
    case 3: gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, 3, 1, relu); break;
    case 4: gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, 4, 1, relu); break;
    case 5: gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, 5, 1, relu); break;
    case 6: gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, 6, 1, relu); break;
    case 7: gconv_row(xb, wb, idx, bias, y, IH, IW, oh, ow0, S, CG, 7, 1, relu); break;
    default: break;
    }
}

#define GCONV_LINE_FN(S, CG)                                                                                          \
    static __attribute__((target("avx512f"))) void gconv_line_s##S##_g##CG(                                          \
        const float *xb, const float *wb, const __m512i *idx, __m512 bias, float *y, int64_t IH, int64_t IW,          \
        int64_t OW, int64_t oh, int relu) {                                                                           \
        gconv_line(xb, wb, idx, bias, y, IH, IW, OW, oh, S, CG, relu);                                                \
    }
GCONV_LINE_FN(1, 4)
GCONV_LINE_FN(2, 4)
GCONV_LINE_FN(1, 8)
GCONV_LINE_FN(2, 8)

/* fn_gconv runs a grouped 3x3 convolution (pads 1 at the top and left, stride 1 or 2) whose
 * groups hold CG = 4 or 8 input and as many output channels, input and output on nChw16c
 * (bufs: x, w as gconv_row reads it, bias or -1, y; n1 = N, n2 = 16-channel blocks, n3 = CG;
 * extra: IH, IW, OH, OW, stride; alg: a ReLU after). The output rows of every image and block
 * split across the threads. */
static __attribute__((target("avx512f"))) idk_status_t fn_gconv(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]), *w = idk_buf_ptr(p, s->bufs[1]);
    const float *bias = s->bufs[2] >= 0 ? idk_buf_ptr(p, s->bufs[2]) : NULL;
    float *y = idk_buf_ptr(p, s->bufs[3]);
    int64_t N = s->n1, CB = s->n2, CG = s->n3, IH = s->extra[0], IW = s->extra[1], OH = s->extra[2],
            OW = s->extra[3], S = s->extra[4];
    int relu = s->alg & 1, nth = s->one_thread ? 1 : p->threads;
    __m512i idx[8];
    for (int j = 0; j < CG; j++) {
        int32_t l[16];
        for (int i = 0; i < 16; i++) l[i] = i - i % (int)CG + j;
        idx[j] = _mm512_loadu_si512(l);
    }
    void (*line)(const float *, const float *, const __m512i *, __m512, float *, int64_t, int64_t, int64_t, int64_t,
                 int) = S == 1 ? (CG == 4 ? gconv_line_s1_g4 : gconv_line_s1_g8)
                               : (CG == 4 ? gconv_line_s2_g4 : gconv_line_s2_g8);
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t r = 0; r < N * CB * OH; r++) {
        int64_t oh = r % OH, nb = r / OH, cb = nb % CB;
        __m512 bv = bias ? _mm512_loadu_ps(bias + cb * 16) : _mm512_setzero_ps();
        line(x + nb * IH * IW * 16, w + cb * 9 * CG * 16, idx, bv, y + (nb * OH + oh) * OW * 16, IH, IW, OW, oh, relu);
    }
    return IDK_OK;
}

/* c_conv_applies: what our C loops for inference convolutions (fn_sconv, fn_pconv) share: an
 * fp32 plan on AVX-512, not training, a 2-D convolution of a 4-D input already on nChw16c,
 * the lowering's switch (env=0 turns it off) not off. */
static int c_conv_applies(idk_plan_t *p, const idk_op_t *op, const char *env) {
    return p->prec == IDK_F32 && !p->tr && T(0)->ndims == 4 && op->ni == 10 && !env_off(env) &&
           __builtin_cpu_supports("avx512f") && is_tag(p, op->in[0], dnnl_f32, dnnl_nChw16c);
}

/* c_conv_posts reads op's post-ops as those loops take them: at most a sum first (its
 * summand on nChw16c: *sum_tid, else -1), then at most one ReLU (*act 1) or, where clip is
 * set, a clip to [*lo, *hi] holding 0 (*act 2). Returns 0 where they are anything else. */
static int c_conv_posts(idk_plan_t *p, const idk_op_t *op, int clip, int *act, int *sum_tid, float *lo, float *hi) {
    *act = 0;
    *sum_tid = -1;
    for (int i = 0; i < op->npost; i++) {
        const idk_post_t *q = &op->post[i];
        if (q->kind == IDK_POST_SUM && i == 0 && q->alg <= 0 && is_tag(p, q->tensor, dnnl_f32, dnnl_nChw16c)) {
            *sum_tid = q->tensor;
        } else if (q->kind == IDK_POST_ELTWISE && q->alg == IDK_ELT_RELU && q->alpha == 0 && !*act) {
            *act = 1;
        } else if (clip && q->kind == IDK_POST_ELTWISE && q->alg == IDK_ELT_CLIP && q->alpha <= 0 && q->beta >= 0 &&
                   !*act) {
            *act = 2;
            *lo = q->alpha;
            *hi = q->beta;
        } else {
            return 0;
        }
    }
    return 1;
}

/* c_conv_step adds a step running fn (a C loop) for convolution op, reading its input and
 * writing its output on nChw16c, its bias plain (bufs[2] -1 without one) and its weights seen
 * as the nd-dimensional wd laid out with strides wst (reordered once from the plain ONNX
 * weights; nd 0: no weights buffer, bufs[1] -1 for the caller to set); with sum_tid >= 0 the
 * output goes over that summand (dst_for_sum). bufs: x, w, bias, y; extra: nextra zeroed
 * values. what names the lowering in errors. */
static idk_status_t c_conv_step(idk_plan_t *p, const idk_op_t *op, int nd, const int64_t *wd, const dnnl_dims_t wst,
                                int sum_tid, int nextra, idk_step_fn fn, const char *what, idk_step_t **out) {
    const idk_tensor_t *x = T(0), *o = OUT;
    dnnl_dims_t wdd;
    for (int i = 0; i < nd; i++) wdd[i] = wd[i];
    dnnl_memory_desc_t plain, wmd, xmd, ymd;
    if (nd > 0) {
        dims_md(&plain, nd, wd);
        if (dnnl_memory_desc_init_by_strides(&wmd, nd, wdd, dnnl_f32, wst) != dnnl_success)
            return idk_fail(p, IDK_ERR_DNNL, "op %d: %s weights layout", p->cur_op, what);
    }
    dnnl_dims_t d;
    for (int i = 0; i < 4; i++) d[i] = x->dims[i];
    dnnl_memory_desc_init_by_tag(&xmd, 4, d, dnnl_f32, dnnl_nChw16c);
    for (int i = 0; i < 4; i++) d[i] = o->dims[i];
    dnnl_memory_desc_init_by_tag(&ymd, 4, d, dnnl_f32, dnnl_nChw16c);
    int xb, wb = -1, cb = -1, yb;
    if ((nd > 0 && (first_view(p, op->in[1], &plain) != 0 || idk_get_view(p, op->in[1], &wmd, &wb) != 0)) ||
        idk_get_view(p, op->in[0], &xmd, &xb) != 0 || (op->nin == 3 && idk_get_plain(p, op->in[2], &cb) != 0) ||
        (yb = sum_tid >= 0 ? dst_for_sum(p, op, sum_tid, &ymd) : new_out(p, op->out[0], &ymd)) < 0)
        return p->err[0] ? IDK_ERR_DNNL : idk_fail(p, IDK_ERR_NOMEM, "op %d: %s buffers", p->cur_op, what);
    idk_step_t *s = idk_new_step(p);
    if (!s || !(s->extra = calloc(nextra, sizeof(int64_t))))
        return idk_fail(p, IDK_ERR_NOMEM, "op %d: %s step", p->cur_op, what);
    s->fn = fn;
    s->nb = 4;
    s->bufs[0] = xb;
    s->bufs[1] = wb;
    s->bufs[2] = cb;
    s->bufs[3] = yb;
    *out = s;
    return IDK_OK;
}

/* lower_gconv lowers a grouped 3x3 convolution with 4 or 8 channels a group in and out
 * (ResNeXt-50's first two stages: 32 groups of 4 and 8) to fn_gconv on nChw16c, the layout
 * of the 1x1 convolutions on either side. oneDNN 2.6 has jit kernels for these groups only
 * on nChw4c and nChw8c, so they cost a reorder of the activations before and after besides
 * (benchmarks/README.md, helper h12w). Constant weights, channels a multiple of 16, pads 1
 * at the top and left, dilation 1, stride 1 or 2 (both axes), at most a ReLU after, fp32 on
 * AVX-512; IDK_GCONV=0 keeps oneDNN's. Returns IDK_ERR_UNSUPPORTED, having added nothing,
 * where it does not apply. */
static idk_status_t lower_gconv(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *w = T(1), *o = OUT;
    if (p->prec != IDK_F32 || x->ndims != 4 || op->ni != 10 || env_off("IDK_GCONV") ||
        !__builtin_cpu_supports("avx512f"))
        return IDK_ERR_UNSUPPORTED;
    /* ia: spatial rank, strides, dilations, pads begin, pads end, group */
    const int64_t *ia = op->ia;
    int64_t C = x->dims[1], g = ia[9], cg = w->dims[1], st = ia[1];
    if (g < 2 || (cg != 4 && cg != 8) || w->dims[0] != C || C % 16 || w->dims[2] != 3 || w->dims[3] != 3 ||
        !w->cdata || (st != 1 && st != 2) || ia[2] != st || ia[3] != 1 || ia[4] != 1 || ia[5] != 1 || ia[6] != 1)
        return IDK_ERR_UNSUPPORTED;
    int relu = 0;
    for (int i = 0; i < op->npost; i++) {
        const idk_post_t *q = &op->post[i];
        if (q->kind != IDK_POST_ELTWISE || q->alg != IDK_ELT_RELU || q->alpha != 0 || relu) return IDK_ERR_UNSUPPORTED;
        relu = 1;
    }
    /* the ONNX weights (C, CG, 3, 3) seen as (C/16, 16/CG, CG, CG, 3, 3), re-laid out once
     * as [C/16][3][3][CG (input j)][16/CG][CG (output)] */
    int64_t wd[6] = {C / 16, 16 / cg, cg, cg, 3, 3};
    dnnl_dims_t wst;
    wst[2] = 1;
    wst[1] = cg;
    wst[3] = 16;
    wst[5] = 16 * cg;
    wst[4] = 16 * cg * 3;
    wst[0] = 16 * cg * 9;
    idk_step_t *s;
    idk_status_t rc = c_conv_step(p, op, 6, wd, wst, -1, 5, fn_gconv, "grouped conv", &s);
    if (rc != IDK_OK) return rc;
    s->n1 = x->dims[0];
    s->n2 = C / 16;
    s->n3 = cg;
    s->extra[0] = x->dims[2];
    s->extra[1] = x->dims[3];
    s->extra[2] = o->dims[2];
    s->extra[3] = o->dims[3];
    s->extra[4] = st;
    s->alg = relu;
    return IDK_OK;
}

/* ---- dense 1x1 and 3x3 convolutions with 7-pixel-wide outputs at batch 1, on nChw16c ---- */

/* A ResNet's last stage at batch 1 (7x7 outputs) streams its weights from memory: ResNet-50's
 * is 53 MB of its 100 (more as Winograd-transformed weights), read once per image for 49
 * pixels each, so oneDNN's kernels run there at 200-250 GFLOP/s on two threads against 300 and
 * more on the stages before it (benchmarks/README.md, the twelfth session). sconv computes
 * such a convolution as 64-output-channel panels, one panel's weights at a time, one tap
 * (kh, kw) of the panel at a time: each output row of 7 pixels x 64 channels is 28 AVX-512
 * accumulators fed by 4 weight vectors and 7 broadcast inputs per input channel, the tap's
 * weights (IC x 64 floats) read from L2 for the rows after the first, and the next tap's (or
 * the next panel's) weights prefetched into L2 a slice per row while this tap computes.
 * Partial sums between taps wait in a per-thread buffer. Every output sums bias, then the taps
 * in (kh, kw) order, then the input channels in order, whatever the number of threads. */

/* SCONV_OW: the output width sconv handles, one row tile; SCONV_OC: a panel's channels. */
#define SCONV_OW 7
#define SCONV_OC 64

/* sconv_row computes tap (kh, kw) of output row oh of one panel (wt: the tap's weights,
 * [IC][64]; bias: the panel's 64 or NULL; part: the row's partial sums, 7 x 64; x: the
 * image's input, nChw16c, IH x IW with IW = 7 * S). first: start from the bias; last:
 * apply the post-ops (sum: add y's value; relu) and write y (the row's first pixel of the
 * panel's first block; ys: floats between blocks), else write part. pf, pfn: prefetch pfn
 * cache lines from pf on per 16 input channels. K, S, KW are constants at each call site. */
static inline __attribute__((always_inline, target("avx512f"))) void
sconv_row(const float *x, int64_t IH, int64_t IC, const float *wt, const float *bias, float *part, int first, int last,
          float *y, int64_t ys, int64_t oh, int kh, const int K, const int S, const int KW, int sum, int relu,
          const char *pf, int64_t pfn) {
    const int IW = SCONV_OW * S, P = K / 2;
    __m512 acc[SCONV_OW][4];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < SCONV_OW; q++)
            acc[q][j] = first ? (bias ? _mm512_loadu_ps(bias + 16 * j) : _mm512_setzero_ps())
                              : _mm512_loadu_ps(part + (q * 4 + j) * 16);
    int64_t ih = oh * S - P + kh, xs = IH * IW * 16;
    if (ih >= 0 && ih < IH) {
        const float *xr = x + ih * IW * 16;
        for (int64_t cb = 0; cb < IC / 16; cb++) {
            const float *xb = xr + cb * xs, *wb = wt + cb * 16 * SCONV_OC;
            if (pf)
                for (int64_t i = 0; i < pfn; i++) _mm_prefetch(pf + (cb * pfn + i) * 64, _MM_HINT_T1);
#pragma GCC unroll 16
            for (int l = 0; l < 16; l++) {
                __m512 wv[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) wv[j] = _mm512_loadu_ps(wb + l * SCONV_OC + 16 * j);
#pragma GCC unroll 7
                for (int q = 0; q < SCONV_OW; q++) {
                    int iw = q * S - P + KW;
                    if (iw < 0 || iw >= IW) continue;
                    __m512 b = _mm512_set1_ps(xb[iw * 16 + l]);
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) acc[q][j] = _mm512_fmadd_ps(b, wv[j], acc[q][j]);
                }
            }
        }
    } else if (pf) {
        for (int64_t i = 0; i < pfn * (IC / 16); i++) _mm_prefetch(pf + i * 64, _MM_HINT_T1);
    }
    if (!last) {
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < SCONV_OW; q++) _mm512_storeu_ps(part + (q * 4 + j) * 16, acc[q][j]);
        return;
    }
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < SCONV_OW; q++) {
            __m512 v = acc[q][j];
            if (sum) v = _mm512_add_ps(v, _mm512_loadu_ps(y + j * ys + q * 16));
            if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
            _mm512_storeu_ps(y + j * ys + q * 16, v);
        }
}

typedef void (*sconv_row_fn)(const float *, int64_t, int64_t, const float *, const float *, float *, int, int, float *,
                             int64_t, int64_t, int, int, int, const char *, int64_t);
#define SCONV_ROW_FN(K, S, KW)                                                                                        \
    static __attribute__((target("avx512f"))) void sconv_row_k##K##_s##S##_w##KW(                                    \
        const float *x, int64_t IH, int64_t IC, const float *wt, const float *bias, float *part, int first, int last, \
        float *y, int64_t ys, int64_t oh, int kh, int sum, int relu, const char *pf, int64_t pfn) {                  \
        sconv_row(x, IH, IC, wt, bias, part, first, last, y, ys, oh, kh, K, S, KW, sum, relu, pf, pfn);              \
    }
SCONV_ROW_FN(1, 1, 0)
SCONV_ROW_FN(1, 2, 0)
SCONV_ROW_FN(3, 1, 0)
SCONV_ROW_FN(3, 1, 1)
SCONV_ROW_FN(3, 1, 2)
SCONV_ROW_FN(3, 2, 0)
SCONV_ROW_FN(3, 2, 1)
SCONV_ROW_FN(3, 2, 2)

/* fn_sconv runs a convolution lowered by lower_sconv (bufs: x, w as [OC/64][K][K][IC][64],
 * bias or -1, y; n1 = IC, n2 = OC, n3 = K; extra: IH, OH, S; alg: 1 ReLU after, 2 sum into
 * y first; 4: panels claimed dynamically). Thread i starts with panel i and claims the next
 * free one as its panel's last tap starts (to prefetch it), so a thread slowed by the host
 * (steal time here comes in bursts of 20-40% a vCPU) does fewer panels; IDK_SCONV_DYN=0
 * splits them in contiguous ranges instead. A panel is one thread's whole, so the bytes do
 * not depend on which thread runs it. */
static __attribute__((target("avx512f"))) idk_status_t fn_sconv(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]), *w = idk_buf_ptr(p, s->bufs[1]);
    const float *bias = s->bufs[2] >= 0 ? idk_buf_ptr(p, s->bufs[2]) : NULL;
    float *y = idk_buf_ptr(p, s->bufs[3]);
    int64_t IC = s->n1, OC = s->n2, K = s->n3, IH = s->extra[0], OH = s->extra[1], S = s->extra[2];
    int relu = s->alg & 1, sum = (s->alg >> 1) & 1, nth = s->one_thread ? 1 : p->threads;
    static const sconv_row_fn k3s1[3] = {sconv_row_k3_s1_w0, sconv_row_k3_s1_w1, sconv_row_k3_s1_w2};
    static const sconv_row_fn k3s2[3] = {sconv_row_k3_s2_w0, sconv_row_k3_s2_w1, sconv_row_k3_s2_w2};
    int64_t np = OC / SCONV_OC, tap = IC * SCONV_OC, psz = K * K * tap, ys = OH * SCONV_OW * 16;
    /* prefetch: the next tap's lines spread over this tap's rows, pfn a 16-channel step */
    int64_t per = (tap * 4 / 64 + OH - 1) / OH, pfn = (per + IC / 16 - 1) / (IC / 16);
    int dyn = (s->alg >> 2) & 1;
    int64_t claim = nth; /* dyn: the next panel not yet claimed (thread i starts with panel i) */
#pragma omp parallel num_threads(nth)
    {
        float part[SCONV_OW * SCONV_OW * SCONV_OC] __attribute__((aligned(64)));
        int n = omp_get_num_threads(), id = omp_get_thread_num();
        int d = dyn && n == nth; /* claim starts at nth: with fewer threads, contiguous ranges */
        int64_t hi = d ? np : np * (id + 1) / n, pn = d ? id : np * id / n;
        while (pn < hi) {
            int64_t next = hi;
            for (int64_t t = 0; t < K * K; t++) {
                const float *wt = w + pn * psz + t * tap;
                /* the panel after this one is claimed as its last tap starts, to prefetch it */
                if (t == K * K - 1) next = d ? __atomic_fetch_add(&claim, 1, __ATOMIC_RELAXED) : pn + 1;
                const float *nx = t + 1 < K * K ? wt + tap : next < hi ? w + next * psz : NULL;
                int kh = (int)(t / K), kw = (int)(t % K);
                sconv_row_fn f = K == 1 ? (S == 1 ? sconv_row_k1_s1_w0 : sconv_row_k1_s2_w0) : (S == 1 ? k3s1 : k3s2)[kw];
                for (int64_t oh = 0; oh < OH; oh++)
                    f(x, IH, IC, wt, bias ? bias + pn * SCONV_OC : NULL, part + oh * SCONV_OW * SCONV_OC, t == 0,
                      t == K * K - 1, y + pn * 4 * ys + oh * SCONV_OW * 16, ys, oh, kh, sum, relu,
                      nx ? (const char *)nx + oh * per * 64 : NULL, nx ? pfn : 0);
            }
            pn = next;
        }
    }
    return IDK_OK;
}

/* lower_sconv lowers a dense convolution at batch 1 to fn_sconv (see above) where it applies:
 * fp32 on AVX-512, constant weights, 1x1 (no padding) or 3x3 (padding 1), stride 1 or 2 on
 * both axes, no dilation, 7 output columns and at most 7 rows, an input SCONV_OW * stride
 * wide, input channels a multiple of 16 and output channels of 64, input (and a sum
 * post-op's summand) already on nChw16c, post-ops at most a sum then a ReLU. IDK_SCONV=0
 * keeps oneDNN's. Returns IDK_ERR_UNSUPPORTED, having added nothing, where it does not apply. */
static idk_status_t lower_sconv(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *w = T(1), *o = OUT;
    const int64_t *ia = op->ia; /* 2-D: strides ia[1..2], dilations ia[3..4], pads ia[5..8], group ia[9] */
    if (!c_conv_applies(p, op, "IDK_SCONV")) return IDK_ERR_UNSUPPORTED;
    int64_t K = w->dims[2], S = ia[1], IC = x->dims[1], OC = o->dims[1];
    if (x->dims[0] != 1 || ia[9] != 1 || !w->cdata || (K != 1 && K != 3) || w->dims[3] != K || (S != 1 && S != 2) ||
        ia[2] != S || ia[3] != 1 || ia[4] != 1 || IC % 16 || OC % SCONV_OC || w->dims[1] != IC ||
        o->dims[3] != SCONV_OW || o->dims[2] > SCONV_OW || x->dims[3] != SCONV_OW * S)
        return IDK_ERR_UNSUPPORTED;
    for (int i = 5; i <= 8; i++)
        if (ia[i] != K / 2) return IDK_ERR_UNSUPPORTED;
    int relu, sum_tid;
    float lo, hi;
    if (!c_conv_posts(p, op, 0, &relu, &sum_tid, &lo, &hi)) return IDK_ERR_UNSUPPORTED;
    /* the ONNX weights (OC, IC, K, K) seen as (OC/64, 64, IC, K, K), laid out once as
     * [OC/64][kh][kw][IC][64] */
    int64_t wd[5] = {OC / SCONV_OC, SCONV_OC, IC, K, K};
    dnnl_dims_t wst = {K * K * IC * SCONV_OC, 1, SCONV_OC, K * IC * SCONV_OC, IC * SCONV_OC};
    idk_step_t *s;
    idk_status_t rc = c_conv_step(p, op, 5, wd, wst, sum_tid, 3, fn_sconv, "sconv", &s);
    if (rc != IDK_OK) return rc;
    s->n1 = IC;
    s->n2 = OC;
    s->n3 = K;
    s->extra[0] = x->dims[2];
    s->extra[1] = o->dims[2];
    s->extra[2] = S;
    s->alg = relu | (sum_tid >= 0 ? 2 : 0) | (env_off("IDK_SCONV_DYN") ? 0 : 4);
    return IDK_OK;
}

/* ---- 1x1 convolutions on nChw16c, work claimed from both ends ---- */

/* At batch 1 a network of depthwise and 1x1 convolutions (MnasNet, MobileNetV2) spends three
 * quarters of its time in 1x1 convolutions of 30-150 us each. oneDNN's kernels split each in
 * fixed halves between the threads and meet at a barrier, so a vCPU the host slows for the
 * moment (here both vCPUs' speeds vary by 15-25% from one 50 us to the next, and differ from
 * each other by 8% on average: benchmarks/README.md, the thirteenth session) holds up the
 * step. pconv computes such a convolution as pieces, a panel of up to 64 output channels
 * (2-4 blocks of 16, the channels split evenly into panels) by a run of pixels of one image,
 * in panel-major order: on two threads the first takes pieces from the front and the second
 * from the back until they meet, so each reads mostly its own panels' weights and a slowed
 * thread does fewer pieces. A tile of P pixels x J blocks keeps P x J AVX-512 accumulators
 * (7 x 4, 8 x 3, 12 x 2, 16 x 1) fed by J weight vectors and P broadcast inputs per input
 * channel. Every output sums bias, then the input channels in order, in one tile, whatever
 * the thread that runs it: the bytes do not depend on the thread count. Channels past a
 * tensor's last (nChw16c pads them to 16) have zero weights and bias, so they stay zero. */

/* pconv_tile: P pixels x J blocks (x: the first pixel's first input block, xs floats between
 * input blocks, icb of them; w: the panel, [icb x 16][J x 16]; y: the first pixel's first
 * output block, ys floats between output blocks). act 1: ReLU, 2: clip to [lo, hi]; sum: add
 * y's value first. */
static inline __attribute__((always_inline, target("avx512f"))) void
pconv_tile(const float *x, int64_t xs, int64_t icb, const float *w, const float *bias, float *y, int64_t ys,
           const int J, const int P, int sum, int act, float lo, float hi) {
    __m512 acc[16][4]; /* P x J used: constant bounds keep them in registers */
    for (int j = 0; j < J; j++) {
        __m512 b = _mm512_loadu_ps(bias + 16 * j);
        for (int q = 0; q < P; q++) acc[q][j] = b;
    }
    for (int64_t cb = 0; cb < icb; cb++) {
        const float *xb = x + cb * xs, *wb = w + cb * 16 * J * 16;
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) {
            __m512 wv[4];
            for (int j = 0; j < J; j++) wv[j] = _mm512_loadu_ps(wb + l * J * 16 + 16 * j);
#pragma GCC unroll 16
            for (int q = 0; q < P; q++) {
                __m512 b = _mm512_set1_ps(xb[q * 16 + l]);
                for (int j = 0; j < J; j++) acc[q][j] = _mm512_fmadd_ps(b, wv[j], acc[q][j]);
            }
        }
    }
    __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    for (int j = 0; j < J; j++)
        for (int q = 0; q < P; q++) {
            __m512 v = acc[q][j];
            if (sum) v = _mm512_add_ps(v, _mm512_loadu_ps(y + j * ys + q * 16));
            if (act == 1) v = _mm512_max_ps(v, _mm512_setzero_ps());
            if (act == 2) v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);
            _mm512_storeu_ps(y + j * ys + q * 16, v);
        }
}

typedef void (*pconv_tile_fn)(const float *, int64_t, int64_t, const float *, const float *, float *, int64_t, int, int,
                              float, float);
#define PCONV_TILE(J, P)                                                                                               \
    static __attribute__((target("avx512f"))) void pconv_tile_##J##_##P(const float *x, int64_t xs, int64_t icb,     \
                                                                        const float *w, const float *bias, float *y, \
                                                                        int64_t ys, int sum, int act, float lo,      \
                                                                        float hi) {                                  \
        pconv_tile(x, xs, icb, w, bias, y, ys, J, P, sum, act, lo, hi);                                                \
    }
#define PCONV_TILES4(J, a, b, c, d) PCONV_TILE(J, a) PCONV_TILE(J, b) PCONV_TILE(J, c) PCONV_TILE(J, d)
PCONV_TILES4(1, 1, 2, 3, 4)
PCONV_TILES4(1, 5, 6, 7, 8)
PCONV_TILES4(1, 9, 10, 11, 12)
PCONV_TILES4(1, 13, 14, 15, 16)
PCONV_TILES4(2, 1, 2, 3, 4)
PCONV_TILES4(2, 5, 6, 7, 8)
PCONV_TILES4(2, 9, 10, 11, 12)
PCONV_TILES4(3, 1, 2, 3, 4)
PCONV_TILES4(3, 5, 6, 7, 8)
PCONV_TILES4(4, 1, 2, 3, 4)
PCONV_TILE(4, 5)
PCONV_TILE(4, 6)
PCONV_TILE(4, 7)
/* PCONV_P: a tile's pixels for J blocks; pconv_tiles[J][n]: the tile of n <= PCONV_P[J] pixels */
static const int PCONV_P[5] = {0, 16, 12, 8, 7};
#define PT4(J, a, b, c, d) pconv_tile_##J##_##a, pconv_tile_##J##_##b, pconv_tile_##J##_##c, pconv_tile_##J##_##d
static const pconv_tile_fn pconv_tiles[5][17] = {
    {0},
    {0, PT4(1, 1, 2, 3, 4), PT4(1, 5, 6, 7, 8), PT4(1, 9, 10, 11, 12), PT4(1, 13, 14, 15, 16)},
    {0, PT4(2, 1, 2, 3, 4), PT4(2, 5, 6, 7, 8), PT4(2, 9, 10, 11, 12)},
    {0, PT4(3, 1, 2, 3, 4), PT4(3, 5, 6, 7, 8)},
    {0, PT4(4, 1, 2, 3, 4), pconv_tile_4_5, pconv_tile_4_6, pconv_tile_4_7},
};

/* pconv_panel: panel i of np over ob output blocks starts at block ob * i / np (the blocks
 * split as evenly as panels of at most 4 allow). */
static int64_t pconv_panel(int64_t ob, int64_t np, int64_t i) { return ob * i / np; }

/* fn_pconv runs a convolution lowered by lower_pconv (bufs: x, w, -, y; w: the panels, panel
 * i at first block b_i holding [ib x 16][J_i x 16] floats from b_i x ib x 256 on, then the
 * bias padded to ob x 16; n1 = ib input blocks, n2 = ob output blocks, n3 = np panels;
 * extra: pixels an image, images, pixels a piece, lo; fv: hi; alg: 1 ReLU, 2 clip, 4 sum,
 * 8 claimed from both ends (IDK_PCONV_DYN=0: contiguous ranges)). */
static __attribute__((target("avx512f"))) idk_status_t fn_pconv(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]), *w = idk_buf_ptr(p, s->bufs[1]);
    float *y = idk_buf_ptr(p, s->bufs[3]);
    int64_t ib = s->n1, ob = s->n2, np = s->n3, hw = s->extra[0], n = s->extra[1], chunk = s->extra[2];
    const float *bias = w + ob * ib * 256;
    float lo, hi = s->fv;
    memcpy(&lo, &s->extra[3], sizeof lo);
    int act = s->alg & 3, sum = (s->alg >> 2) & 1, nth = s->one_thread ? 1 : p->threads;
    int64_t nch = (hw + chunk - 1) / chunk, npc = np * n * nch;
    uint64_t ends = (uint64_t)npc << 32; /* the next piece from the front (low half), one past the last (high) */
#pragma omp parallel num_threads(nth)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int both = (s->alg & 8) && nt == 2;
        int64_t next = npc * id / nt, end = npc * (id + 1) / nt;
        for (;;) {
            int64_t pc;
            if (both) {
                uint64_t v = __atomic_load_n(&ends, __ATOMIC_RELAXED), nv;
                do {
                    uint64_t f = v & 0xffffffffu, b = v >> 32;
                    if (f >= b) goto done;
                    pc = id == 0 ? (int64_t)f : (int64_t)b - 1;
                    nv = id == 0 ? (b << 32) | (f + 1) : ((b - 1) << 32) | f;
                } while (!__atomic_compare_exchange_n(&ends, &v, nv, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
            } else {
                if (next >= end) break;
                pc = next++;
            }
            int64_t pn = pc / (n * nch), img = pc / nch % n, p0 = pc % nch * chunk;
            int64_t p1 = p0 + chunk < hw ? p0 + chunk : hw, b0 = pconv_panel(ob, np, pn);
            int J = (int)(pconv_panel(ob, np, pn + 1) - b0), P = PCONV_P[J];
            const float *xi = x + img * ib * hw * 16, *wp = w + b0 * ib * 256;
            float *yi = y + (img * ob + b0) * hw * 16;
            for (int64_t q = p0; q < p1; q += P) {
                int m = q + P <= p1 ? P : (int)(p1 - q);
                pconv_tiles[J][m](xi + q * 16, hw * 16, ib, wp, bias + b0 * 16, yi + q * 16, hw * 16, sum, act, lo, hi);
            }
        }
    done:;
    }
    return IDK_OK;
}

/* pconv_network: plan p is one whose 1x1 convolutions lower_pconv takes (those from 64
 * input channels up, with nChw16c inputs): fp32 inference on AVX-512 in a network with
 * depthwise convolutions and no dense kxk ones, IDK_PCONV not 0. */
static int pconv_network(const idk_plan_t *p) {
    return p->prec == IDK_F32 && !p->tr && p->depthwise && !p->dense_kxk && !env_off("IDK_PCONV") &&
           __builtin_cpu_supports("avx512f");
}

/* lower_pconv lowers a 1x1 convolution to fn_pconv (see above) where it applies: fp32 on
 * AVX-512, inference, constant weights, stride 1, no padding or groups, input (and a sum
 * post-op's summand) already on nChw16c, post-ops at most a sum then a ReLU or a clip whose
 * range holds 0, at batch 1, at least 64 input channels, in a network
 * with depthwise convolutions and no dense kxk ones (MnasNet, MobileNet, EfficientNet-B0,
 * ShuffleNet). Where it does not apply it measured level or behind oneDNN's: fewer input
 * channels (16-48: 0.9-1.3x oneDNN's time standalone, pconv.c in benchmarks/out/s13), and in
 * ResNet-50, DenseNet-121 and ResNeXt-50 (level or better at the mean, 1-5% behind at the
 * fastest run). IDK_PCONV=0 keeps oneDNN's. Returns IDK_ERR_UNSUPPORTED, having added
 * nothing, where it does not apply. */
static idk_status_t lower_pconv(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *w = T(1), *o = OUT;
    const int64_t *ia = op->ia; /* 2-D: strides ia[1..2], dilations ia[3..4], pads ia[5..8], group ia[9] */
    if (!pconv_network(p) || !c_conv_applies(p, op, "IDK_PCONV")) return IDK_ERR_UNSUPPORTED;
    int64_t IC = x->dims[1], OC = o->dims[1], N = x->dims[0], hw = o->dims[2] * o->dims[3];
    if (N != 1 || ia[9] != 1 || !w->cdata || w->dims[2] != 1 || w->dims[3] != 1 || w->dims[1] != IC ||
        ia[1] != 1 || ia[2] != 1 || o->dims[2] != x->dims[2] || o->dims[3] != x->dims[3])
        return IDK_ERR_UNSUPPORTED;
    for (int i = 5; i <= 8; i++)
        if (ia[i] != 0) return IDK_ERR_UNSUPPORTED;
    int act, sum_tid;
    float lo = 0, hi = 0;
    if (IC < 64 || !c_conv_posts(p, op, 1, &act, &sum_tid, &lo, &hi)) return IDK_ERR_UNSUPPORTED;
    int64_t ib = (IC + 15) / 16, ob = (OC + 15) / 16, np = (ob + 3) / 4;
    /* the panels and the bias, zero past the last channels */
    size_t nw = (size_t)(ob * ib * 256 + ob * 16);
    float *pk = aligned_alloc(64, (nw * sizeof(float) + 63) / 64 * 64);
    if (!pk) return idk_fail(p, IDK_ERR_NOMEM, "op %d: pconv weights", p->cur_op);
    memset(pk, 0, nw * sizeof(float));
    int wpb, bpb = -1;
    if (idk_get_plain(p, op->in[1], &wpb) != 0 || (op->nin == 3 && idk_get_plain(p, op->in[2], &bpb) != 0)) {
        free(pk);
        return IDK_ERR_DNNL;
    }
    const float *wsrc = idk_buf_ptr(p, wpb), *bsrc = bpb >= 0 ? idk_buf_ptr(p, bpb) : NULL;
    for (int64_t pn = 0; pn < np; pn++) {
        int64_t b0 = pconv_panel(ob, np, pn), jw = (pconv_panel(ob, np, pn + 1) - b0) * 16;
        float *dst = pk + b0 * ib * 256;
        for (int64_t oc = b0 * 16; oc < b0 * 16 + jw && oc < OC; oc++)
            for (int64_t ic = 0; ic < IC; ic++) dst[ic * jw + oc - b0 * 16] = wsrc[oc * IC + ic];
    }
    if (bsrc) memcpy(pk + ob * ib * 256, bsrc, (size_t)OC * sizeof(float));
    int wb = idk_new_buffer(p, nw * sizeof(float));
    if (wb < 0) {
        free(pk);
        return idk_fail(p, IDK_ERR_NOMEM, "op %d: pconv weights", p->cur_op);
    }
    p->b[wb].ext = pk;
    p->b[wb].first = -2; /* an owned external buffer */
    idk_step_t *s;
    idk_status_t rc = c_conv_step(p, op, 0, NULL, NULL, sum_tid, 4, fn_pconv, "pconv", &s);
    if (rc != IDK_OK) return rc;
    s->bufs[1] = wb;
    s->bufs[2] = -1;
    s->n1 = ib;
    s->n2 = ob;
    s->n3 = np;
    s->extra[0] = hw;
    s->extra[1] = N;
    /* a piece: about 600 kFLOP (some 4 us on one thread), whole tiles of the widest panel */
    int64_t P = PCONV_P[pconv_panel(ob, np, 1) - pconv_panel(ob, np, 0)], chunk = 600000 / (2 * ib * 16 * 64);
    chunk = chunk < P ? P : chunk / P * P;
    s->extra[2] = chunk;
    memcpy(&s->extra[3], &lo, sizeof lo);
    s->fv = hi;
    s->alg = act | (sum_tid >= 0 ? 4 : 0) | (env_off("IDK_PCONV_DYN") ? 0 : 8);
    return IDK_OK;
}

static idk_status_t lower_conv(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *w = T(1), *o = OUT;
    int nd = x->ndims, S = nd - 2;
    const int64_t *ia = op->ia;
    int64_t g = ia[1 + 4 * S];
    dnnl_dims_t st, dl, pb, pe;
    for (int i = 0; i < S; i++) {
        st[i] = ia[1 + i];
        dl[i] = ia[1 + S + i] - 1;
        pb[i] = ia[1 + 2 * S + i];
        pe[i] = ia[1 + 3 * S + i];
    }
    if (g > 1 && nd == 4) {
        idk_status_t gr = lower_gconv(p, op);
        if (gr != IDK_ERR_UNSUPPORTED) return gr;
    }
    if (g == 1 && nd == 4) {
        idk_status_t sr = lower_sconv(p, op);
        if (sr != IDK_ERR_UNSUPPORTED) return sr;
        sr = lower_pconv(p, op);
        if (sr != IDK_ERR_UNSUPPORTED) return sr;
    }
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_data_type_t dt = compute_dt(p);
    /* Layout, per convolution (fp32, 2-D), from the shapes and the input's layout:
     * - depthwise convolutions (one input channel per group) use oneDNN's nChw16c blocked
     *   layout: its jit depthwise kernel there beats the nhwc brgemm one (MobileNetV2 and
     *   V3 at batch 1 on one thread: 125-130 against 102-111 images per CPU-second); but
     *   those with at most 49 output pixels in all (the 7x7 stage at batch 1) let oneDNN
     *   choose (nhwc, brdgmm), and the 1x1 convolutions after them follow: brgemm's 1x1
     *   kernel runs the 192->1152 channel 7x7 expansions in 0.18 ms where the nChw16c jit
     *   one takes 0.31-0.34 (MnasNet on one thread; per-layer minimum with DNNL_VERBOSE,
     *   sum over layers on one / two threads: MnasNet 6.43 -> 6.07 / 3.55 -> 3.42 ms,
     *   MobileNetV2 6.53 -> 5.79 / 4.59 -> 4.13, EfficientNet-B0 12.7 -> 11.3 / 6.70 -> 6.66,
     *   ShuffleNetV2 4.76 -> 4.69 on one). Not where fn_pconv takes the 1x1 convolutions
     *   around them (pconv_network) and the depthwise one has at most a ReLU or clip after
     *   (MnasNet, MobileNetV2, ShuffleNet; EfficientNet-B0's SiLU and MobileNetV3's hardswish
     *   1x1 convolutions stay oneDNN's): there the 7x7 stage stays on nChw16c with fn_pconv
     *   (TestEnvAB against IDK_DW_NHWC_MAX=49, mean: MnasNet 4.52 -> 4.18 and 4.13 -> 3.99 ms,
     *   MobileNetV2 4.15 -> 3.99, ShuffleNetV2 3.73 -> 3.52; EfficientNet-B0 and MobileNetV3
     *   level). IDK_DW_NHWC_MAX (output pixels) overrides.
     *   Past the Winograd stages of a network with dense kxk convolutions (outputs under
     *   wino_min_pixels: 28x28 at batch 1 in networks with depthwise convolutions, 4x4 at
     *   batch >= 2) a depthwise one reading an nhwc tensor stays on nhwc (brdgmm): there the
     *   1x1 convolutions on either side are nhwc (the 1x1 rule below), and nChw16c cost a reorder before and after every
     *   depthwise one and around its squeeze-and-excitation (EfficientNetV2-S batch 1,
     *   14x14 stage: 60 of its 295 steps; sum of each op's fastest on one thread 48.2 ->
     *   47.2 ms, the depthwise ops with their reorders 0.20 -> 0.165 ms each, the 1x1
     *   projections after them 0.42 -> 0.39). IDK_DW_FOLLOW=0 keeps nChw16c;
     * - a 1x1 convolution keeps an nhwc input's layout (brgemm kernel) and takes nChw16c
     *   otherwise (jit kernel; about as fast), so blocked blocks need no reorder; one whose
     *   sum post-op's summand is larger than its input (a bottleneck's last convolution)
     *   follows the summand's layout instead, reordering the smaller tensor;
     * - a first convolution (fewer than 8 input channels) is nChw16c in networks whose other
     *   convolutions are all 1x1, depthwise or grouped (MobileNet, MnasNet, EfficientNet-B0,
     *   ShuffleNet, RegNet: their 1x1 jit kernels on nChw16c), else nhwc; a 7x7 one is nhwc
     *   in both (ResNeXt's stem; from_nhwc_stem sends the 1x1 convolutions after it back to
     *   nChw16c); a stride-1 or overlapping stride-4 one is nChw16c in dense networks too
     *   (stem_blocked: VGG's, AlexNet's);
     * - a dense 3x3 stride-1 convolution (channels multiples of 16) with at least 14x14
     *   outputs at batch 1, 7x7 from 512 input channels (28x28 in networks with depthwise
     *   convolutions), from one 4x4
     *   tile up at batch >= 2 (wino_min_pixels; at batch 1 a ResNet's 14x14 and 7x7 stages
     *   now run Winograd too, its 1x1 convolutions following the blocked layout; the F(4x4)
     *   kernel wins down to 7x7, so a ResNet's or GoogLeNet's 14x14 and 7x7 stages at batch 8 are
     *   Winograd and nChw16c throughout, and the 1x1 rule below does not apply there)
     *   runs oneDNN's Winograd kernels on nChw16c (F(2x2,3x3) at batch 1, F(4x4,3x3) at
     *   batch 8): fewer multiplications, and faster than brgconv at these shapes (per-layer
     *   minimum ms with DNNL_VERBOSE on a loaded 2-vCPU Ice Lake VM: ResNet-18/50 batch 1 on
     *   one thread 56x56x64 0.76-0.80 against 1.28-1.41, 28x28x128 0.85-0.89 against
     *   1.27-1.33; batch 8 on two threads 4.3 against 6.8 and 3.8 against 6.3); at 14x14 and
     *   7x7 the first measurements had brgconv ahead (1.9 against 1.5 ms at 14x14x256 on one
     *   thread; 1.33 against 0.86 and 1.42 against 1.27 ms on two), later ones with the
     *   blocked 1x1 convolutions around them not (wino_min_pixels). The nhwc<->nChw16c
     *   reorders around them cost ResNet-50 batch 1 about 1 ms of the 3 saved; its numerics
     *   stay within the torch cross-checks (1e-6 relative). IDK_CONV_ALGO=winograd or direct
     *   and IDK_WINO_MIN (output pixels) override, for experiments. Not where the F(4x4)
     *   kernel would block the tiles badly and brgconv is faster (wino_tiles_poor: at most 32
     *   input channels at 145-148 output pixels a side, Inception-v3's stem at batch >= 2);
     *   and where the F(2x2) kernel blocks its GEMMs poorly at batch 1, F(4x4) or a
     *   direct convolution instead (wino_f2_blocks_poorly, Inception-v3's stem at batch 1);
     * - a ResNet bottleneck's stride-2 3x3 convolution at batch 1 reading nChw16c stays on
     *   nChw16c (s2_blocked: no reorder before it or into the projection's sum after it);
     * - every other convolution lets oneDNN choose (format any: nhwc and its brgemm
     *   kernels), which runs dense 3x3 convolutions 1.3-2x faster than the nChw16c jit
     *   kernel at batch 1 and 8 on AVX-512 (ResNet-18 batch 1: 29-33 against 21-23 images
     *   per CPU-second; ResNet-50 15.1-15.7 against 12.2; Wide ResNet-50-2 1.25x) and
     *   whose grouped kernels are jit where nChw16c ones are oneDNN's reference (ResNeXt's
     *   groups of 4 channels, RegNet's of 8).
     * bf16 plans always let oneDNN choose: on AMX it picks nhwc for its brgemm kernels, 4x
     * faster than the AVX512_BF16 blocked ones on ResNet-50 batch 8. IDK_CONV_LAYOUT=any or
     * blocked16 overrides, for experiments. */
    const char *lay = getenv("IDK_CONV_LAYOUT");
    int blocked = 0, wino = 0;
    int64_t minsp = wino_min_pixels(p, x);
    {
        /* Winograd (oneDNN's jit kernels, on nChw16c) for dense 3x3 stride-1 convolutions
         * with large outputs: see the layout comment above. */
        const char *al = getenv("IDK_CONV_ALGO");
        if (nd == 4 && dt == dnnl_f32 && g == 1 && w->dims[2] == 3 && w->dims[3] == 3 && st[0] == 1 && st[1] == 1 &&
            dl[0] == 0 && dl[1] == 0 && x->dims[1] % 16 == 0 && o->dims[1] % 16 == 0)
            wino = al ? strcmp(al, "winograd") == 0 : o->dims[2] * o->dims[3] >= minsp && !wino_tiles_poor(x, o);
    }
    if (wino && !lay) {
        blocked = 1;
    } else if (nd == 4 && lay) {
        blocked = strcmp(lay, "blocked16") == 0;
    } else if (nd == 4 && dt == dnnl_f32) {
        int k1 = w->dims[2] == 1 && w->dims[3] == 1;
        if (g > 1) {
            /* depthwise: nChw16c (jit_dw), except small outputs (see the layout comment) */
            const char *dm = getenv("IDK_DW_NHWC_MAX");
            int act, sum_tid;
            float lo, hi;
            int pconv_around = pconv_network(p) && c_conv_posts(p, op, 1, &act, &sum_tid, &lo, &hi);
            int64_t dwmax = dm ? atoll(dm) : pconv_around ? 0 : 49;
            blocked = w->dims[1] == 1 && o->dims[0] * o->dims[2] * o->dims[3] > dwmax &&
                      !(p->dense_kxk && o->dims[2] * o->dims[3] < minsp && !env_off("IDK_DW_FOLLOW") &&
                        is_nhwc(p, op->in[0], dt));
        } else if (s2_blocked(p, op, x, w, o, st, dt)) {
            blocked = 1;
        } else if (x->dims[1] < 8) {
            blocked = !p->dense_kxk || stem_blocked(w, st);
            if (blocked && w->dims[2] == 7 && w->dims[3] == 7 && !env_off("IDK_STEM_NHWC")) {
                /* a ResNet stem's 7x7 (ResNeXt's: no dense kxk after it) runs brgconv on nhwc
                 * and the 1x1 convolutions after it return to nChw16c (from_nhwc_stem) */
                blocked = 0;
                p->t[op->out[0]].nhwc_stem = 1;
            }
        } else if (k1 && p->dense_kxk && o->dims[2] * o->dims[3] < minsp && !getenv("IDK_K1_FOLLOW")) {
            /* past the Winograd stages of a network with dense kxk convolutions (a ResNet's
             * 14x14 and 7x7 stages), whose 3x3 convolutions run brgemm on nhwc: nhwc (brgemm
             * 1x1, as fast as the nChw16c jit one there), so the residual stream and the 3x3
             * convolutions share one layout. Following a blocked input instead kept the
             * whole stream blocked from the first Winograd stage on, with two reorders
             * around every later 3x3 convolution (ResNet-50 batch 1: 16 of its 24). */
            blocked = 0;
        } else if (k1) {
            /* follow the input's layout, or the summand's when it is the larger (a bottleneck's
             * last 1x1 convolution: reordering its input costs a quarter of the summand) */
            int follow = op->in[0];
            for (int i = 0; i < op->npost; i++) {
                int t = op->post[i].tensor;
                if (op->post[i].kind == IDK_POST_SUM && p->t[t].ndims == 4 &&
                    idk_tensor_volume(&p->t[t]) > idk_tensor_volume(x))
                    follow = t;
            }
            blocked = !is_nhwc(p, follow, dt) || from_nhwc_stem(p, follow);
        }
    }
retry:
    if (blocked) {
        dnnl_dims_t d;
        for (int i = 0; i < 4; i++) d[i] = x->dims[i];
        dnnl_memory_desc_init_by_tag(&src, 4, d, dt, x->dims[1] < 8 ? dnnl_nchw : dnnl_nChw16c);
        for (int i = 0; i < 4; i++) d[i] = o->dims[i];
        dnnl_memory_desc_init_by_tag(&dst, 4, d, dt, dnnl_nChw16c);
        const idk_op_t *dw;
        if (!wino && !lay && dt == dnnl_f32 && g == 1 && w->dims[2] == 1 && w->dims[3] == 1 && x->dims[1] >= 8 &&
            st[0] == 1 && st[1] == 1 && pb[0] == 0 && pb[1] == 0 && pe[0] == 0 && pe[1] == 0 &&
            (dw = dw_fusable(p, op)) != NULL) {
            idk_status_t fr = lower_conv_dw(p, op, dw, &src, &dst);
            if (fr != IDK_ERR_UNSUPPORTED) return fr;
        }
    } else {
        any_md_dt(&src, x, dt);
        any_md_dt(&dst, o, dt);
    }
    int64_t wd[IDK_MAX_DIMS + 1];
    int wn;
    if (g > 1) {
        wd[0] = g;
        wd[1] = w->dims[0] / g;
        for (int i = 1; i < nd; i++) wd[i + 1] = w->dims[i];
        wn = nd + 1;
    } else {
        for (int i = 0; i < nd; i++) wd[i] = w->dims[i];
        wn = nd;
    }
    dnnl_dims_t wdd;
    for (int i = 0; i < wn; i++) wdd[i] = wd[i];
    dnnl_memory_desc_init_by_tag(&wei, wn, wdd, dt, dnnl_format_tag_any);
    int has_bias = op->nin == 3;
    if (has_bias) dims_md(&bias, 1, &o->dims[1]);
    dnnl_convolution_desc_t cd;
    dnnl_status_t ds = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                                  wino ? dnnl_convolution_winograd : dnnl_convolution_direct,
                                                                  &src, &wei, has_bias ? &bias : NULL, &dst, st, dl, pb, pe);
    if (ds != dnnl_success && blocked) {
        blocked = wino = 0;
        goto retry;
    }
    if (ds != dnnl_success) return dnnl_err(p, "conv desc", ds);
    dnnl_primitive_attr_t attr = new_attr();
    int sum_tid;
    idk_status_t st2 = with_post_ops(p, op, attr, &sum_tid);
    if (st2 != IDK_OK) {
        dnnl_primitive_attr_destroy(attr);
        return st2;
    }
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &cd, attr, p->eng, NULL);
    if (ds == dnnl_success && wino && !getenv("IDK_CONV_ALGO") && wino_f2_blocks_poorly(pd)) {
        /* F(2x2) blocked poorly: F(4x4) if its tiles block well, else direct */
        dnnl_primitive_desc_t f4 = wino_f4_blocks_poorly(o) ? NULL : wino_f4_pd(p, &cd, attr);
        dnnl_primitive_desc_destroy(pd);
        if (!f4) {
            dnnl_primitive_attr_destroy(attr);
            blocked = wino = 0;
            goto retry;
        }
        pd = f4;
    }
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success && blocked) {
        blocked = wino = 0;
        goto retry;
    }
    if (ds != dnnl_success) return dnnl_err(p, "conv primitive desc", ds);
    if (blocked && !lay) {
        /* The forced nChw16c layout has no jit kernel for some shapes, and oneDNN then runs
         * its reference kernel: grouped convolutions whose groups hold fewer than 16
         * channels (ResNeXt's 32 groups of 4: 0.44 against 10.2 images/s at batch 1).
         * Letting oneDNN choose the layout finds a jit kernel there. */
        if (pd_is_ref(pd)) {
            dnnl_primitive_desc_destroy(pd);
            blocked = wino = 0;
            goto retry;
        }
    }
    dnnl_memory_desc_t smd = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    dnnl_memory_desc_t wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_desc_t dmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    int sb, wb, bb = -1, db;
    idk_status_t rc = IDK_ERR_DNNL;
    if (idk_get_view(p, op->in[0], &smd, &sb) != 0) goto out;
    if (g > 1) {
        /* view the ONNX weights (O, I/g, k...) as (g, O/g, I/g, k...) on the same plain buffer */
        dnnl_memory_desc_t gm;
        dims_md(&gm, wn, wd);
        if (first_view(p, op->in[1], &gm) != 0) goto out;
    }
    if (idk_get_view(p, op->in[1], &wmd, &wb) != 0) goto out;
    if (has_bias && idk_get_plain(p, op->in[2], &bb) != 0) goto out;
    db = sum_tid >= 0 ? dst_for_sum(p, op, sum_tid, &dmd) : new_out(p, op->out[0], &dmd);
    if (db < 0) goto out;
    idk_step_t *s;
    if ((rc = finish_prim(p, pd, &s)) != IDK_OK) goto out;
    idk_step_arg(s, DNNL_ARG_SRC, &smd, sb);
    idk_step_arg(s, DNNL_ARG_WEIGHTS, &wmd, wb);
    if (has_bias) idk_step_arg(s, DNNL_ARG_BIAS, &bias, bb);
    idk_step_arg(s, DNNL_ARG_DST, &dmd, db);
    rc = IDK_OK;
out:
    dnnl_primitive_desc_destroy(pd);
    if (rc != IDK_OK && p->err[0] == 0) idk_fail(p, rc, "op %d: conv lowering failed", p->cur_op);
    return rc;
}

/* pool_prim adds a pooling primitive over op's input in its own layout. With optional set,
 * it returns IDK_ERR_UNSUPPORTED, having added nothing and recorded no error, where oneDNN
 * has no pooling for it or only its reference kernel (the caller lowers the op another way). */
static idk_status_t pool_prim(idk_plan_t *p, const idk_op_t *op, dnnl_alg_kind_t alg, const dnnl_dims_t k,
                              const dnnl_dims_t st, const dnnl_dims_t dl, const dnnl_dims_t pb, const dnnl_dims_t pe,
                              int optional) {
    idk_view_t *v;
    if (idk_primary(p, op->in[0], &v) != 0) return IDK_ERR_DNNL;
    dnnl_memory_desc_t src = v->md, dst;
    int sb = v->buf;
    any_md_dt(&dst, OUT, src.data_type); /* bf16 in, bf16 out */
    dnnl_pooling_v2_desc_t d;
    dnnl_status_t ds = dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_inference, alg, &src, &dst, st, k, dl, pb, pe);
    if (ds != dnnl_success) return optional ? IDK_ERR_UNSUPPORTED : dnnl_err(p, "pool desc", ds);
    dnnl_primitive_attr_t attr = new_attr();
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return optional ? IDK_ERR_UNSUPPORTED : dnnl_err(p, "pool primitive desc", ds);
    if (pd_is_ref(pd) && (src.ndims == 4 || src.ndims == 5) && !env_off("IDK_POOL_NHWC")) {
        /* oneDNN 2.6 pools bf16 only in 16-channel blocks or channels-last: a bf16 input in
         * 8-channel blocks (RegNetY's grouped convolutions of 8-channel groups) gets the
         * reference kernel, 16.8 ms for RegNetY's first squeeze-excitation mean at batch 8.
         * Pool a channels-last copy instead (one reorder; IDK_POOL_NHWC=0 does not). */
        dnnl_memory_desc_t nhwc;
        dnnl_memory_desc_init_by_tag(&nhwc, src.ndims, src.dims, src.data_type,
                                     src.ndims == 4 ? dnnl_acdb : dnnl_acdeb);
        dnnl_primitive_desc_t pd2 = NULL;
        if (dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_inference, alg, &nhwc, &dst, st, k, dl, pb, pe) ==
                dnnl_success &&
            (attr = new_attr()) != NULL) {
            if (dnnl_primitive_desc_create(&pd2, &d, attr, p->eng, NULL) != dnnl_success) pd2 = NULL;
            dnnl_primitive_attr_destroy(attr);
        }
        if (pd2 && !pd_is_ref(pd2) && idk_get_view(p, op->in[0], &nhwc, &sb) == 0) {
            dnnl_primitive_desc_destroy(pd);
            pd = pd2;
            src = nhwc;
        } else if (pd2) {
            dnnl_primitive_desc_destroy(pd2);
        }
    }
    if (optional && pd_is_ref(pd)) {
        dnnl_primitive_desc_destroy(pd);
        return IDK_ERR_UNSUPPORTED;
    }
    dnnl_memory_desc_t dmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    int db = new_out(p, op->out[0], &dmd);
    idk_step_t *s;
    idk_status_t rc = db < 0 ? IDK_ERR_NOMEM : finish_prim(p, pd, &s);
    if (rc == IDK_OK) {
        idk_step_arg(s, DNNL_ARG_SRC, &src, sb);
        idk_step_arg(s, DNNL_ARG_DST, &dmd, db);
    }
    dnnl_primitive_desc_destroy(pd);
    return optional && rc == IDK_ERR_UNSUPPORTED ? IDK_ERR_DNNL : rc;
}

static idk_status_t lower_pool(idk_plan_t *p, const idk_op_t *op) {
    int S = (int)op->ia[1];
    const int64_t *ia = op->ia;
    dnnl_dims_t k, st, dl, pb, pe;
    for (int i = 0; i < S; i++) {
        k[i] = ia[2 + i];
        st[i] = ia[2 + S + i];
        dl[i] = ia[2 + 2 * S + i] - 1;
        pb[i] = ia[2 + 3 * S + i];
        pe[i] = ia[2 + 4 * S + i];
    }
    dnnl_alg_kind_t alg = ia[0] == IDK_POOL_MAX ? dnnl_pooling_max
                          : ia[0] == IDK_POOL_AVG_INCLUDE_PAD ? dnnl_pooling_avg_include_padding
                                                              : dnnl_pooling_avg_exclude_padding;
    int ident = 1;
    for (int i = 0; i < S; i++) ident = ident && k[i] == 1 && st[i] == 1 && pb[i] == 0 && pe[i] == 0;
    if (ident && !env_off("IDK_POOL_IDENT")) {
        /* a 1x1 window at stride 1 (AlexNet's and VGG's adaptive average pool at its input's
         * own size): the output is the input, in its layout, as a Reshape's is */
        idk_view_t *v;
        if (idk_primary(p, op->in[0], &v) != 0) return IDK_ERR_DNNL;
        dnnl_memory_desc_t md = v->md;
        if (idk_set_output(p, op->out[0], &md, v->plain, v->buf) != 0)
            return idk_fail(p, IDK_ERR_INVALID, "op %d: output written twice", p->cur_op);
        return IDK_OK;
    }
    return pool_prim(p, op, alg, k, st, dl, pb, pe, 0);
}

/* eltwise_step adds one eltwise primitive from (md, sb) into (md, db). */
static idk_status_t eltwise_step(idk_plan_t *p, const dnnl_memory_desc_t *md, int sb, int db, dnnl_alg_kind_t k, float a,
                                 float b) {
    dnnl_eltwise_desc_t d;
    dnnl_status_t ds = dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, k, md, a, b);
    if (ds != dnnl_success) return dnnl_err(p, "eltwise desc", ds);
    dnnl_primitive_attr_t attr = new_attr();
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return dnnl_err(p, "eltwise primitive desc", ds);
    idk_step_t *s;
    idk_status_t rc = finish_prim(p, pd, &s);
    if (rc == IDK_OK) {
        idk_step_arg(s, DNNL_ARG_SRC, md, sb);
        idk_step_arg(s, DNNL_ARG_DST, md, db);
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

static idk_status_t lower_eltwise(idk_plan_t *p, const idk_op_t *op) {
    idk_view_t *v;
    idk_primary(p, op->in[0], &v);
    dnnl_memory_desc_t md = v->md;
    int sb = v->buf;
    if (op->fused) { /* the BatchNormalization before applied this ReLU: the output is its buffer */
        dnnl_memory_desc_t pm;
        idk_plain_md(&pm, OUT->ndims, OUT->dims);
        return idk_set_output(p, op->out[0], &md, dnnl_memory_desc_equal(&pm, &md), sb) == 0 ? IDK_OK : IDK_ERR_INVALID;
    }
    int db = new_out(p, op->out[0], &md);
    if (db < 0) return IDK_ERR_NOMEM;
    if (idk_tensor_volume(OUT) == 0) return IDK_OK;
    dnnl_alg_kind_t k;
    float a, b;
    int alg = (int)op->ia[0];
    eltwise_alg(alg, op->fa[0], op->fa[1], &k, &a, &b);
    idk_status_t rc = eltwise_step(p, &md, sb, db, k, a, b);
    if (rc == IDK_OK && alg == IDK_ELT_HARD_SIGMOID) rc = eltwise_step(p, &md, db, db, dnnl_eltwise_clip, 0.f, 1.f);
    return rc;
}

/* ---- C loops ---- */

/* bin_row applies alg to one row of n elements (strides sa, sb; contiguous output) */
static void bin_row(int alg, const float *pa, const float *pb, float *po, int64_t n, int64_t sa, int64_t sb) {
    if (sa == 1 && (sb == 1 || sb == 0)) {
        switch (alg) { /* the common cases, vectorised */
        case IDK_BIN_ADD:
            if (sb) {
#pragma omp simd
                for (int64_t i = 0; i < n; i++) po[i] = pa[i] + pb[i];
            } else {
                float b = pb[0];
#pragma omp simd
                for (int64_t i = 0; i < n; i++) po[i] = pa[i] + b;
            }
            return;
        case IDK_BIN_MUL:
            if (sb) {
#pragma omp simd
                for (int64_t i = 0; i < n; i++) po[i] = pa[i] * pb[i];
            } else {
                float b = pb[0];
#pragma omp simd
                for (int64_t i = 0; i < n; i++) po[i] = pa[i] * b;
            }
            return;
        case IDK_BIN_SUB:
            if (sb) {
#pragma omp simd
                for (int64_t i = 0; i < n; i++) po[i] = pa[i] - pb[i];
                return;
            }
            break;
        default: break;
        }
    }
    switch (alg) {
    case IDK_BIN_ADD: for (int64_t i = 0; i < n; i++) po[i] = pa[i * sa] + pb[i * sb]; break;
    case IDK_BIN_SUB: for (int64_t i = 0; i < n; i++) po[i] = pa[i * sa] - pb[i * sb]; break;
    case IDK_BIN_MUL: for (int64_t i = 0; i < n; i++) po[i] = pa[i * sa] * pb[i * sb]; break;
    case IDK_BIN_DIV: for (int64_t i = 0; i < n; i++) po[i] = pa[i * sa] / pb[i * sb]; break;
    case IDK_BIN_POW: for (int64_t i = 0; i < n; i++) po[i] = powf(pa[i * sa], pb[i * sb]); break;
    case IDK_BIN_MAX: for (int64_t i = 0; i < n; i++) po[i] = fmaxf(pa[i * sa], pb[i * sb]); break;
    case IDK_BIN_MIN: for (int64_t i = 0; i < n; i++) po[i] = fminf(pa[i * sa], pb[i * sb]); break;
    case IDK_BIN_FMOD: for (int64_t i = 0; i < n; i++) po[i] = fmodf(pa[i * sa], pb[i * sb]); break;
    default:
        for (int64_t i = 0; i < n; i++) {
            float x = pa[i * sa];
            po[i] = x < 0 ? x * pb[i * sb] : x;
        }
    }
}

/* fn_binary: a broadcasting float binary op over plain data, rows split across the plan's
 * threads (each element is computed alone, so any split gives the same bytes) */
static idk_status_t fn_binary(idk_plan_t *p, idk_step_t *s) {
    const float *a = idk_buf_ptr(p, s->bufs[0]), *b = idk_buf_ptr(p, s->bufs[1]);
    float *o = idk_buf_ptr(p, s->bufs[2]);
    int nd = s->nd;
    int64_t total = 1;
    for (int i = 0; i < nd; i++) total *= s->d[i];
    if (total == 0) return IDK_OK;
    int64_t inner = nd ? s->d[nd - 1] : 1, sa = nd ? s->sa[nd - 1] : 0, sb = nd ? s->sb[nd - 1] : 0;
    int64_t rows = total / inner;
    int nth = total >= 32768 && p->threads > 1 ? p->threads : 1;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t ia = 0, ib = 0, q = r;
        for (int k = nd - 2; k >= 0; k--) {
            int64_t ix = q % s->d[k];
            q /= s->d[k];
            ia += ix * s->sa[k];
            ib += ix * s->sb[k];
        }
        bin_row(s->alg, a + ia, b + ib, o + r * inner, inner, sa, sb);
    }
    return IDK_OK;
}

/* merge_dims drops size-1 dims and merges adjacent dims that both strided inputs walk as
 * one (row-major output), so C loops run long contiguous rows */
static void merge_dims(idk_step_t *s) {
    int n = 0;
    for (int i = 0; i < s->nd; i++) {
        if (s->d[i] == 1 && s->nd > 1) continue;
        if (n > 0 && s->sa[n - 1] == s->sa[i] * s->d[i] && s->sb[n - 1] == s->sb[i] * s->d[i]) {
            s->d[n - 1] *= s->d[i];
            s->sa[n - 1] = s->sa[i];
            s->sb[n - 1] = s->sb[i];
            continue;
        }
        s->d[n] = s->d[i];
        s->sa[n] = s->sa[i];
        s->sb[n] = s->sb[i];
        n++;
    }
    if (n == 0) {
        s->d[0] = 1;
        s->sa[0] = s->sb[0] = 0;
        n = 1;
    }
    s->nd = n;
}

static void bcast_strides(const idk_tensor_t *x, const idk_tensor_t *o, int64_t *st) {
    int64_t s = 1;
    for (int i = o->ndims - 1; i >= 0; i--) {
        int xi = i - (o->ndims - x->ndims);
        if (xi < 0 || x->dims[xi] == 1) {
            st[i] = 0;
        } else {
            st[i] = s;
        }
        if (xi >= 0) s *= x->dims[xi];
    }
}

/* collapse_bcast_md rewrites a plain a (dims of o) and its broadcast operand b (dims bd, 1
 * where b repeats) with size-1 dims dropped and adjacent dims merged where b is alike
 * (broadcast or not) along both: a window mask 1x64x1x49x49 over 1x64x3x49x49 becomes
 * 64x1x2401 over 64x3x2401, a broadcast oneDNN's jit binary kernel has (per_mb_spatial),
 * where the 5-d form leaves it only its reference kernel. a must be plain row-major. */
static void collapse_bcast_md(const idk_tensor_t *o, const int64_t *bd, dnnl_memory_desc_t *amd,
                              dnnl_memory_desc_t *bmd) {
    dnnl_memory_desc_t pm;
    dims_md(&pm, o->ndims, o->dims);
    if (!dnnl_memory_desc_equal(&pm, amd)) return;
    int64_t cd[IDK_MAX_DIMS], cb[IDK_MAX_DIMS];
    int n = 0, prev = -1;
    for (int i = 0; i < o->ndims; i++) {
        if (o->dims[i] == 1) continue;
        int bc = bd[i] == 1;
        if (n > 0 && bc == prev) {
            cd[n - 1] *= o->dims[i];
            cb[n - 1] *= bd[i];
        } else {
            cd[n] = o->dims[i];
            cb[n] = bd[i];
            n++;
        }
        prev = bc;
    }
    if (n == 0) {
        cd[0] = cb[0] = 1;
        n = 1;
    }
    if (n == o->ndims) return;
    dims_md(amd, n, cd);
    dims_md(bmd, n, cb);
}

static int try_dnnl_binary(idk_plan_t *p, const idk_op_t *op, int ai, int bi) {
    const idk_tensor_t *a = &p->t[op->in[ai]], *b = &p->t[op->in[bi]], *o = OUT;
    if (!same_dims(a, o) || o->ndims == 0 || idk_tensor_volume(o) == 0) return 0;
    dnnl_alg_kind_t alg;
    switch (op->ia[0]) {
    case IDK_BIN_ADD: alg = dnnl_binary_add; break;
    case IDK_BIN_SUB: alg = dnnl_binary_sub; break;
    case IDK_BIN_MUL: alg = dnnl_binary_mul; break;
    case IDK_BIN_DIV: alg = dnnl_binary_div; break;
    case IDK_BIN_MAX: alg = dnnl_binary_max; break;
    case IDK_BIN_MIN: alg = dnnl_binary_min; break;
    default: return 0;
    }
    if (ai != 0 && (alg == dnnl_binary_sub || alg == dnnl_binary_div)) return 0;
    idk_view_t *v;
    idk_primary(p, op->in[ai], &v);
    dnnl_memory_desc_t amd = v->md, bmd;
    int ab = v->buf, bb;
    /* bview: b is read in the layout bmd describes (else plain f32). A per-channel operand
     * (1 or N, C, 1, 1) of a blocked nChw16c a (squeeze-excitation's scale, EfficientNet) is given
     * in the same blocked layout: with a plain one oneDNN 2.6 falls back to its reference
     * kernel, ~100x slower (280 ms for a 32x112x112 multiply). */
    int bview = 1, tries = 1;
    int64_t bd[IDK_MAX_DIMS];
    if (same_dims(b, o)) {
        bmd = amd;
    } else {
        for (int i = 0; i < o->ndims; i++) {
            int bi2 = i - (o->ndims - b->ndims);
            bd[i] = bi2 < 0 ? 1 : b->dims[bi2];
        }
        dims_md(&bmd, o->ndims, bd);
        bview = 0;
        if (o->ndims == 4 && (bd[0] == 1 || bd[0] == o->dims[0]) && bd[1] == o->dims[1] && bd[2] == 1 && bd[3] == 1) {
            dnnl_dims_t ad, d1;
            for (int i = 0; i < 4; i++) {
                ad[i] = o->dims[i];
                d1[i] = bd[i];
            }
            /* a in 8c or 4c blocks (oneDNN's own choice after a grouped convolution that had
             * no jit kernel in 16c: RegNet's groups of 8 channels) has no jit binary kernel in
             * oneDNN 2.6 either (its squeeze-excitation multiplies took 1.0 s of a 1.45 s
             * batch): a is reordered to 16c for the operation, a jit reorder */
            dnnl_memory_desc_t blk;
            for (int k = 0; k < 2; k++) {
                dnnl_memory_desc_init_by_tag(&blk, 4, ad, amd.data_type, k == 0 ? dnnl_nChw8c : dnnl_nChw4c);
                if (dnnl_memory_desc_equal(&blk, &amd)) {
                    dnnl_memory_desc_t a16;
                    dnnl_memory_desc_init_by_tag(&a16, 4, ad, amd.data_type, dnnl_nChw16c);
                    if (idk_get_view(p, op->in[ai], &a16, &ab) != 0) return -1;
                    amd = a16;
                    break;
                }
            }
            dnnl_memory_desc_init_by_tag(&blk, 4, ad, amd.data_type, dnnl_nChw16c);
            if (dnnl_memory_desc_equal(&blk, &amd)) {
                dnnl_memory_desc_init_by_tag(&bmd, 4, d1, amd.data_type, dnnl_nChw16c);
                bview = 1;
                tries = 2;
            }
        }
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t samd = amd, sbmd = bmd; /* what the primitive is given (same bytes) */
    for (int t = 0; t < tries && !pd; t++) {
        if (t == 1) { /* the blocked operand was refused: plain */
            dims_md(&bmd, o->ndims, bd);
            bview = 0;
        }
        samd = amd;
        sbmd = bmd;
        if (!bview) collapse_bcast_md(o, bd, &samd, &sbmd);
        dnnl_binary_desc_t d;
        if (dnnl_binary_desc_init(&d, alg, &samd, &sbmd, &samd) != dnnl_success) continue;
        dnnl_primitive_attr_t attr = new_attr();
        if (dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL) != dnnl_success) pd = NULL;
        dnnl_primitive_attr_destroy(attr);
    }
    if (!pd) return 0;
    /* oneDNN's reference binary kernel (a broadcast no jit strategy covers) is slower than
     * the C loop by 10-100x: Swin's shifted-window mask add took 40 ms of a 270 ms batch */
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
        strncmp(impl, "ref", 3) == 0) {
        dnnl_primitive_desc_destroy(pd);
        return 0;
    }
    int rc = -1;
    if (bview) {
        if (idk_get_view(p, op->in[bi], &bmd, &bb) != 0) goto out;
    } else {
        if (idk_get_plain(p, op->in[bi], &bb) != 0) goto out;
    }
    int db = new_out(p, op->out[0], &amd);
    idk_step_t *s;
    if (db < 0 || finish_prim(p, pd, &s) != IDK_OK) goto out;
    idk_step_arg(s, DNNL_ARG_SRC_0, &samd, ab);
    idk_step_arg(s, DNNL_ARG_SRC_1, &sbmd, bb);
    idk_step_arg(s, DNNL_ARG_DST, &samd, db);
    rc = 1;
out:
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

/* ---- broadcasting C loops over int64 and mixed tensors ---- */

static idk_status_t strided_step(idk_plan_t *p, const idk_op_t *op, const int64_t *st, int64_t base);

/* bc_t walks the output's dims in row-major order, keeping each input's element offset
 * (broadcast strides: 0 along dims the input repeats). */
typedef struct {
    int nd, nin;
    int64_t d[IDK_MAX_DIMS], st[3][IDK_MAX_DIMS], idx[IDK_MAX_DIMS], off[3];
} bc_t;

static void bc_init(bc_t *b, const idk_step_t *s) {
    memset(b, 0, sizeof *b);
    b->nd = s->nd;
    b->nin = s->nb - 1;
    for (int i = 0; i < s->nd; i++) {
        b->d[i] = s->d[i];
        for (int j = 0; j < b->nin; j++) b->st[j][i] = s->extra[j * IDK_MAX_DIMS + i];
    }
}

static inline void bc_next(bc_t *b) {
    for (int k = b->nd - 1; k >= 0; k--) {
        b->idx[k]++;
        for (int j = 0; j < b->nin; j++) b->off[j] += b->st[j][k];
        if (b->idx[k] < b->d[k]) return;
        for (int j = 0; j < b->nin; j++) b->off[j] -= b->st[j][k] * b->d[k];
        b->idx[k] = 0;
    }
}

static int64_t step_total(const idk_step_t *s) {
    int64_t n = 1;
    for (int i = 0; i < s->nd; i++) n *= s->d[i];
    return n;
}

static idk_status_t fn_ibinary(idk_plan_t *p, idk_step_t *s) {
    const int64_t *a = idk_buf_ptr(p, s->bufs[0]), *b = idk_buf_ptr(p, s->bufs[1]);
    int64_t *o = idk_buf_ptr(p, s->bufs[2]);
    int64_t n = step_total(s);
    bc_t it;
    bc_init(&it, s);
    for (int64_t i = 0; i < n; i++, bc_next(&it)) {
        int64_t x = a[it.off[0]], y = b[it.off[1]];
        switch (s->alg) {
        case IDK_BIN_ADD: o[i] = (int64_t)((uint64_t)x + (uint64_t)y); break;
        case IDK_BIN_SUB: o[i] = (int64_t)((uint64_t)x - (uint64_t)y); break;
        case IDK_BIN_MUL: o[i] = (int64_t)((uint64_t)x * (uint64_t)y); break;
        case IDK_BIN_MAX: o[i] = x > y ? x : y; break;
        case IDK_BIN_MIN: o[i] = x < y ? x : y; break;
        case IDK_BIN_MOD:
        case IDK_BIN_FMOD: {
            if (y == 0) return idk_fail(p, IDK_ERR_RUNTIME, "integer modulo by zero");
            int64_t r = y == -1 ? 0 : x % y;
            if (s->alg == IDK_BIN_MOD && r != 0 && ((r < 0) != (y < 0))) r += y;
            o[i] = r;
            break;
        }
        default:
            if (y == 0) return idk_fail(p, IDK_ERR_RUNTIME, "integer division by zero");
            o[i] = (x == INT64_MIN && y == -1) ? INT64_MIN : x / y;
        }
    }
    return IDK_OK;
}

static int truthy(const void *base, int esz, int64_t i) {
    return esz == 4 ? ((const float *)base)[i] != 0 : ((const int64_t *)base)[i] != 0;
}

static idk_status_t fn_compare(idk_plan_t *p, idk_step_t *s) {
    const void *a = idk_buf_ptr(p, s->bufs[0]), *b = idk_buf_ptr(p, s->bufs[1]);
    int64_t *o = idk_buf_ptr(p, s->bufs[2]);
    int64_t n = step_total(s);
    bc_t it;
    bc_init(&it, s);
    for (int64_t i = 0; i < n; i++, bc_next(&it)) {
        int r;
        if (s->alg >= IDK_CMP_AND) {
            int x = truthy(a, s->esz, it.off[0]), y = truthy(b, s->esz, it.off[1]);
            r = s->alg == IDK_CMP_AND ? x && y : s->alg == IDK_CMP_OR ? x || y : x != y;
        } else if (s->esz == 4) {
            float x = ((const float *)a)[it.off[0]], y = ((const float *)b)[it.off[1]];
            r = s->alg == IDK_CMP_EQ ? x == y : s->alg == IDK_CMP_LT ? x < y : s->alg == IDK_CMP_GT ? x > y
                : s->alg == IDK_CMP_LE ? x <= y : x >= y;
        } else {
            int64_t x = ((const int64_t *)a)[it.off[0]], y = ((const int64_t *)b)[it.off[1]];
            r = s->alg == IDK_CMP_EQ ? x == y : s->alg == IDK_CMP_LT ? x < y : s->alg == IDK_CMP_GT ? x > y
                : s->alg == IDK_CMP_LE ? x <= y : x >= y;
        }
        o[i] = r;
    }
    return IDK_OK;
}

static idk_status_t fn_where(idk_plan_t *p, idk_step_t *s) {
    const int64_t *c = idk_buf_ptr(p, s->bufs[0]);
    const char *a = idk_buf_ptr(p, s->bufs[1]), *b = idk_buf_ptr(p, s->bufs[2]);
    char *o = idk_buf_ptr(p, s->bufs[3]);
    int64_t n = step_total(s);
    size_t esz = (size_t)s->esz;
    bc_t it;
    bc_init(&it, s);
    for (int64_t i = 0; i < n; i++, bc_next(&it)) {
        if (c[it.off[0]]) memcpy(o + i * esz, a + it.off[1] * esz, esz);
        else memcpy(o + i * esz, b + it.off[2] * esz, esz);
    }
    return IDK_OK;
}

/* bcast_step lowers an op whose nin inputs broadcast to its output into the C loop fn. */
static idk_status_t bcast_step(idk_plan_t *p, const idk_op_t *op, idk_step_fn fn, int nin) {
    const idk_tensor_t *o = OUT;
    int bufs[3];
    for (int k = 0; k < nin; k++)
        if (idk_get_plain(p, op->in[k], &bufs[k]) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn;
    s->alg = op->ni > 0 ? (int)op->ia[0] : 0;
    s->nb = nin + 1;
    for (int k = 0; k < nin; k++) s->bufs[k] = bufs[k];
    s->bufs[nin] = db;
    s->nd = o->ndims;
    s->esz = idk_esz(T(nin - 1)->dtype);
    s->extra = calloc(3 * IDK_MAX_DIMS, sizeof(int64_t));
    if (!s->extra) return IDK_ERR_NOMEM;
    for (int i = 0; i < o->ndims; i++) s->d[i] = o->dims[i];
    for (int k = 0; k < nin; k++) bcast_strides(T(k), o, s->extra + k * IDK_MAX_DIMS);
    return IDK_OK;
}

/* wrap_int reduces v modulo 2^bits of the narrow integer type `to` (idk_cast_to_t) and
 * returns it sign- or zero-extended, as a C conversion to that type does on two's
 * complement machines (ONNX and numpy integer arithmetic wrap). */
static int64_t wrap_int(int64_t v, int to) {
    uint64_t u = (uint64_t)v;
    switch (to) {
    case IDK_CAST_I32: return (int64_t)(int32_t)(uint32_t)u;
    case IDK_CAST_I16: return (int64_t)(int16_t)(uint16_t)u;
    case IDK_CAST_I8: return (int64_t)(int8_t)(uint8_t)u;
    case IDK_CAST_U8: return (int64_t)(uint8_t)u;
    }
    return v;
}

static idk_status_t fn_cast(idk_plan_t *p, idk_step_t *s) {
    const void *x = idk_buf_ptr(p, s->bufs[0]);
    void *o = idk_buf_ptr(p, s->bufs[1]);
    int64_t n = s->n1;
    int fin = s->esz == 4, fout = s->alg & 1, to = s->alg >> 1;
    for (int64_t i = 0; i < n; i++) {
        if (to == IDK_CAST_BOOL) {
            int v = truthy(x, s->esz, i);
            if (fout) ((float *)o)[i] = (float)v;
            else ((int64_t *)o)[i] = v;
        } else if (fin && fout) {
            ((float *)o)[i] = ((const float *)x)[i];
        } else if (fin) {
            float v = ((const float *)x)[i];
            int64_t w = (v >= -9.2233720368547758e18f && v < 9.2233720368547758e18f) ? (int64_t)v : INT64_MIN;
            ((int64_t *)o)[i] = wrap_int(w, to);
        } else if (fout) {
            ((float *)o)[i] = (float)((const int64_t *)x)[i];
        } else {
            ((int64_t *)o)[i] = wrap_int(((const int64_t *)x)[i], to);
        }
    }
    return IDK_OK;
}

static idk_status_t fn_unary(idk_plan_t *p, idk_step_t *s) {
    int64_t n = s->n1;
    if (s->esz == 4) {
        const float *x = idk_buf_ptr(p, s->bufs[0]);
        float *o = idk_buf_ptr(p, s->bufs[1]);
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            switch (s->alg) {
            case IDK_UN_ERF: o[i] = erff(v); break;
            case IDK_UN_NEG: o[i] = -v; break;
            case IDK_UN_ABS: o[i] = fabsf(v); break;
            case IDK_UN_FLOOR: o[i] = floorf(v); break;
            case IDK_UN_CEIL: o[i] = ceilf(v); break;
            default: o[i] = v > 0 ? 1.f : v < 0 ? -1.f : v; break; /* SIGN (NaN stays NaN) */
            }
        }
        return IDK_OK;
    }
    const int64_t *x = idk_buf_ptr(p, s->bufs[0]);
    int64_t *o = idk_buf_ptr(p, s->bufs[1]);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = x[i];
        switch (s->alg) {
        case IDK_UN_NOT: o[i] = v == 0; break;
        case IDK_UN_NEG: o[i] = (int64_t)(0 - (uint64_t)v); break;
        case IDK_UN_ABS: o[i] = v < 0 ? (int64_t)(0 - (uint64_t)v) : v; break;
        default: o[i] = (v > 0) - (v < 0); break;
        }
    }
    return IDK_OK;
}

/* elem_step lowers a one-input element-wise op (same volume) into the C loop fn. */
static idk_status_t elem_step(idk_plan_t *p, const idk_op_t *op, idk_step_fn fn, int alg) {
    int sb;
    if (idk_get_plain(p, op->in[0], &sb) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn;
    s->alg = alg;
    s->nb = 2;
    s->bufs[0] = sb;
    s->bufs[1] = db;
    s->esz = idk_esz(T(0)->dtype);
    s->n1 = (int64_t)idk_tensor_volume(OUT);
    return IDK_OK;
}

static idk_status_t fn_cumsum(idk_plan_t *p, idk_step_t *s) {
    int64_t outer = s->n1, len = s->n2, inner = s->n3;
    int excl = s->alg & 1, rev = s->alg & 2;
    if (s->esz == 4) {
        const float *x = idk_buf_ptr(p, s->bufs[0]);
        float *o = idk_buf_ptr(p, s->bufs[1]);
        for (int64_t a = 0; a < outer; a++)
            for (int64_t c = 0; c < inner; c++) {
                float acc = 0;
                for (int64_t k = 0; k < len; k++) {
                    int64_t j = rev ? len - 1 - k : k, at = (a * len + j) * inner + c;
                    float v = x[at];
                    if (!excl) acc += v;
                    o[at] = acc;
                    if (excl) acc += v;
                }
            }
        return IDK_OK;
    }
    const int64_t *x = idk_buf_ptr(p, s->bufs[0]);
    int64_t *o = idk_buf_ptr(p, s->bufs[1]);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            uint64_t acc = 0;
            for (int64_t k = 0; k < len; k++) {
                int64_t j = rev ? len - 1 - k : k, at = (a * len + j) * inner + c;
                uint64_t v = (uint64_t)x[at];
                if (!excl) acc += v;
                o[at] = (int64_t)acc;
                if (excl) acc += v;
            }
        }
    return IDK_OK;
}

/* outer_len_inner splits x's dims around axis. */
static void outer_len_inner(const idk_tensor_t *x, int ax, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < ax; i++) *outer *= x->dims[i];
    for (int i = ax + 1; i < x->ndims; i++) *inner *= x->dims[i];
    *len = x->dims[ax];
}

static idk_status_t lower_cumsum(idk_plan_t *p, const idk_op_t *op) {
    idk_status_t rc = elem_step(p, op, fn_cumsum, (int)(op->ia[1] != 0) | (op->ia[2] != 0 ? 2 : 0));
    if (rc != IDK_OK) return rc;
    idk_step_t *s = &p->s[p->ns - 1];
    outer_len_inner(T(0), (int)op->ia[0], &s->n1, &s->n2, &s->n3);
    return IDK_OK;
}

static idk_status_t fn_argmax(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]);
    int64_t *o = idk_buf_ptr(p, s->bufs[1]);
    int64_t outer = s->n1, len = s->n2, inner = s->n3;
    int last = s->alg & 1, mn = s->alg & 2;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            const float *v = x + a * len * inner + c;
            int64_t best = 0;
            float bv = v[0];
            for (int64_t k = 1; k < len; k++) {
                float y = v[k * inner];
                int better = mn ? (y < bv || (last && y == bv)) : (y > bv || (last && y == bv));
                if (better) {
                    best = k;
                    bv = y;
                }
            }
            o[a * inner + c] = best;
        }
    return IDK_OK;
}

static idk_status_t lower_argmax(idk_plan_t *p, const idk_op_t *op) {
    idk_status_t rc = elem_step(p, op, fn_argmax, (int)(op->ia[1] != 0) | (op->ia[2] != 0 ? 2 : 0));
    if (rc != IDK_OK) return rc;
    idk_step_t *s = &p->s[p->ns - 1];
    outer_len_inner(T(0), (int)op->ia[0], &s->n1, &s->n2, &s->n3);
    return IDK_OK;
}

static idk_status_t lower_expand(idk_plan_t *p, const idk_op_t *op) {
    int64_t st[IDK_MAX_DIMS];
    bcast_strides(T(0), OUT, st);
    return strided_step(p, op, st, 0);
}

/* fn_layer_norm: the C loop used when the statistics are outputs too. */
static idk_status_t fn_layer_norm(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]), *w = idk_buf_ptr(p, s->bufs[1]);
    const float *b = s->bufs[2] >= 0 ? idk_buf_ptr(p, s->bufs[2]) : NULL;
    float *y = idk_buf_ptr(p, s->bufs[3]);
    float *mo = s->bufs[4] >= 0 ? idk_buf_ptr(p, s->bufs[4]) : NULL;
    float *io = s->bufs[5] >= 0 ? idk_buf_ptr(p, s->bufs[5]) : NULL;
    int64_t outer = s->n1, inner = s->n2;
    for (int64_t r = 0; r < outer; r++) {
        const float *xr = x + r * inner;
        float *yr = y + r * inner;
        double m = 0, v = 0;
        for (int64_t i = 0; i < inner; i++) m += xr[i];
        m /= (double)inner;
        for (int64_t i = 0; i < inner; i++) v += ((double)xr[i] - m) * ((double)xr[i] - m);
        v /= (double)inner;
        float inv = (float)(1.0 / sqrt(v + (double)s->fv));
        for (int64_t i = 0; i < inner; i++) yr[i] = ((xr[i] - (float)m) * inv) * w[i] + (b ? b[i] : 0.f);
        if (mo) mo[r] = (float)m;
        if (io) io[r] = inv;
    }
    return IDK_OK;
}

static idk_status_t lower_layer_norm(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0);
    int ax = (int)op->ia[0];
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax; i < x->ndims; i++) inner *= x->dims[i];
    int sb, wb, bb = -1;
    if (idk_get_plain(p, op->in[0], &sb) != 0 || idk_get_plain(p, op->in[1], &wb) != 0) return IDK_ERR_DNNL;
    if (op->nin == 3 && idk_get_plain(p, op->in[2], &bb) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    if (db < 0) return IDK_ERR_NOMEM;
    if (op->nout > 1) {
        int sbuf[2] = {-1, -1};
        for (int k = 1; k < op->nout; k++)
            if ((sbuf[k - 1] = new_out(p, op->out[k], NULL)) < 0) return IDK_ERR_NOMEM;
        idk_step_t *s = idk_new_step(p);
        if (!s) return IDK_ERR_NOMEM;
        s->fn = fn_layer_norm;
        s->nb = 6;
        int bufs[6] = {sb, wb, bb, db, sbuf[0], sbuf[1]};
        memcpy(s->bufs, bufs, sizeof bufs);
        s->n1 = outer;
        s->n2 = inner;
        s->fv = op->fa[0];
        return IDK_OK;
    }
    if (outer * inner == 0) return IDK_OK;
    int64_t d2[2] = {outer, inner}, d1[1] = {inner}, d0[1] = {outer};
    dnnl_memory_desc_t md, smd, wmd;
    idk_plain_md(&md, 2, d2);
    idk_plain_md(&wmd, 1, d1);
    idk_plain_md(&smd, 1, d0);
    unsigned flags = dnnl_use_scale | (bb >= 0 ? dnnl_use_shift : 0);
    dnnl_layer_normalization_desc_t d;
    dnnl_status_t ds = dnnl_layer_normalization_forward_desc_init(&d, dnnl_forward_inference, &md, &smd, op->fa[0], flags);
    if (ds != dnnl_success) return dnnl_err(p, "layer normalization desc", ds);
    dnnl_primitive_attr_t attr = new_attr();
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return dnnl_err(p, "layer normalization primitive desc", ds);
    idk_step_t *s;
    idk_status_t rc = finish_prim(p, pd, &s);
    if (rc == IDK_OK) {
        idk_step_arg(s, DNNL_ARG_SRC, &md, sb);
        idk_step_arg(s, DNNL_ARG_DST, &md, db);
        idk_step_arg(s, DNNL_ARG_SCALE, &wmd, wb);
        if (bb >= 0) idk_step_arg(s, DNNL_ARG_SHIFT, &wmd, bb);
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

static idk_status_t lower_binary(idk_plan_t *p, const idk_op_t *op) {
    if (OUT->dtype == IDK_I64) return bcast_step(p, op, fn_ibinary, 2);
    int r = try_dnnl_binary(p, op, 0, 1);
    int comm = op->ia[0] == IDK_BIN_ADD || op->ia[0] == IDK_BIN_MUL || op->ia[0] == IDK_BIN_MAX || op->ia[0] == IDK_BIN_MIN;
    if (r == 0 && comm) r = try_dnnl_binary(p, op, 1, 0);
    if (r < 0) return p->err[0] ? IDK_ERR_DNNL : idk_fail(p, IDK_ERR_DNNL, "op %d: binary failed", p->cur_op);
    if (r > 0) return IDK_OK;
    const idk_tensor_t *a = T(0), *b = T(1), *o = OUT;
    int ab, bb;
    if (idk_get_plain(p, op->in[0], &ab) != 0 || idk_get_plain(p, op->in[1], &bb) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn_binary;
    s->alg = (int)op->ia[0];
    s->nb = 3;
    s->bufs[0] = ab;
    s->bufs[1] = bb;
    s->bufs[2] = db;
    s->nd = o->ndims;
    for (int i = 0; i < o->ndims; i++) s->d[i] = o->dims[i];
    bcast_strides(a, o, s->sa);
    bcast_strides(b, o, s->sb);
    merge_dims(s);
    return IDK_OK;
}

/* matmul_plain_pd: a matmul whose permuted operands or output (strided memory
 * descriptors) leave oneDNN only its reference kernel gets them as plain copies instead
 * (plain[k] set): a reorder of each strided input into a plain buffer before, of the plain
 * product into the output after (what separate Transpose ops did). Returns the primitive. */
static dnnl_primitive_desc_t matmul_plain_pd(idk_plan_t *p, dnnl_memory_desc_t *amd, dnnl_memory_desc_t *bmd,
                                             const dnnl_memory_desc_t *cmd, dnnl_memory_desc_t *dmd,
                                             const dnnl_primitive_attr_t attr, int plain[3]) {
    dnnl_memory_desc_t *mds[3] = {amd, bmd, dmd};
    for (int k = 0; k < 3; k++) {
        dnnl_memory_desc_t pm;
        idk_plain_md(&pm, mds[k]->ndims, mds[k]->dims);
        plain[k] = !dnnl_memory_desc_equal(&pm, mds[k]);
        if (plain[k]) *mds[k] = pm;
    }
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_matmul_desc_init(&d, amd, bmd, cmd, dmd) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL) != dnnl_success)
        return NULL;
    return pd;
}

/* reorder_step adds a oneDNN reorder from (smd, sb) to (dmd, db). */
static idk_status_t reorder_step(idk_plan_t *p, const dnnl_memory_desc_t *smd, int sb, const dnnl_memory_desc_t *dmd, int db) {
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, smd, p->eng, dmd, p->eng, NULL) != dnnl_success)
        return idk_fail(p, IDK_ERR_DNNL, "op %d: reorder failed", p->cur_op);
    idk_step_t *s;
    idk_status_t rc = finish_prim(p, pd, &s);
    if (rc == IDK_OK) {
        idk_step_arg(s, DNNL_ARG_FROM, smd, sb);
        idk_step_arg(s, DNNL_ARG_TO, dmd, db);
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

/* GEMV_BLK outputs form one block of the weights, laid out K x GEMV_BLK (oneDNN's AB16b64a:
 * blocks of 64 rows of the N x K matrix, K padded to 16 and N to 64 with zeros), so a thread
 * streams its blocks as one run of memory, keeps a block's 64 sums in four registers, and can
 * skip the row of a k whose input is zero. */
#define GEMV_BLK 64
/* Each output sums its products in chunks of GEMV_CHUNK consecutive k (a fresh partial sum
 * per chunk, added to the total after it): a fixed order, and a rounding error growing with
 * K / GEMV_CHUNK + GEMV_CHUNK rather than with K. */
#define GEMV_CHUNK 256
/* How many rows ahead the AVX-512 loop prefetches its stream. */
#define GEMV_AHEAD 16

/* gemv_finish adds the bias, applies the ReLU and stores the block's outputs that exist. */
static inline __attribute__((always_inline)) void gemv_finish(const float *sum, const float *bias, float *y,
                                                              int64_t n0, int64_t N, int relu) {
    for (int64_t j = 0; j < GEMV_BLK && n0 + j < N; j++) {
        float s = sum[j];
        if (bias) s += bias[n0 + j];
        y[n0 + j] = relu && s < 0 ? 0 : s;
    }
}

/* gemv_block_generic and gemv_block_avx512 compute one block (w: its K x GEMV_BLK weights)
 * over the inputs listed in ks (then GEMV_AHEAD copies of the last, for the prefetch), chunk c
 * being ks[at[c]] to ks[at[c + 1] - 1], nc chunks, with
 * the same operations in the same order, a product rounded then added (the kernel compiles as
 * ISO C11, which does not contract a * b + c), so both give the same bytes; which thread takes
 * a block does not change them either. */
static void gemv_block_generic(const float *w, const float *x, const int64_t *ks, const int64_t *at, int64_t nc,
                               const float *bias, float *y, int64_t n0, int64_t N, int relu) {
    float tot[GEMV_BLK] = {0};
    for (int64_t c = 0; c < nc; c++) {
        float acc[GEMV_BLK] = {0};
        for (int64_t i = at[c]; i < at[c + 1]; i++)
            for (int j = 0; j < GEMV_BLK; j++) acc[j] += w[ks[i] * GEMV_BLK + j] * x[ks[i]];
        for (int j = 0; j < GEMV_BLK; j++) tot[j] += acc[j];
    }
    gemv_finish(tot, bias, y, n0, N, relu);
}

__attribute__((target("avx512f"))) static void gemv_block_avx512(const float *w, const float *x, const int64_t *ks,
                                                                const int64_t *at, int64_t nc, const float *bias,
                                                                float *y, int64_t n0, int64_t N, int relu) {
    __m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
    for (int64_t c = 0; c < nc; c++) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t i = at[c]; i < at[c + 1]; i++) {
            const float *r = w + ks[i] * GEMV_BLK, *q = w + ks[i + GEMV_AHEAD] * GEMV_BLK;
            /* the hardware prefetcher alone left the stream slower (benchmarks/README.md) */
            for (int j = 0; j < GEMV_BLK; j += 16) _mm_prefetch((const char *)(q + j), _MM_HINT_T0);
            __m512 xv = _mm512_set1_ps(x[ks[i]]);
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_load_ps(r), xv));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_load_ps(r + 16), xv));
            a2 = _mm512_add_ps(a2, _mm512_mul_ps(_mm512_load_ps(r + 32), xv));
            a3 = _mm512_add_ps(a3, _mm512_mul_ps(_mm512_load_ps(r + 48), xv));
        }
        t0 = _mm512_add_ps(t0, a0);
        t1 = _mm512_add_ps(t1, a1);
        t2 = _mm512_add_ps(t2, a2);
        t3 = _mm512_add_ps(t3, a3);
    }
    float tot[GEMV_BLK];
    _mm512_storeu_ps(tot, t0);
    _mm512_storeu_ps(tot + 16, t1);
    _mm512_storeu_ps(tot + 32, t2);
    _mm512_storeu_ps(tot + 48, t3);
    gemv_finish(tot, bias, y, n0, N, relu);
}

/* fn_gemv runs a one-row matrix product against constant weights (n1 = N, n2 = K, n3 = K
 * padded to 16; bufs: x, w in GEMV_BLK-row blocks, bias or -1, y; alg bit 0: ReLU after, bit
 * 1: every weight finite, bit 2: the generic code; extra: room for K + GEMV_AHEAD indices, then for the chunks'
 * starts), the blocks split across the threads. With finite weights it leaves out the k whose
 * input is zero (after a ReLU, a third to a half of a classifier's inputs), and does not
 * read their rows of weights: their products are +-0, and adding +-0 to a sum that starts
 * at +0 leaves it as it was, so the bytes are those of the full sum in the same order. */
static idk_status_t fn_gemv(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]), *w = idk_buf_ptr(p, s->bufs[1]);
    const float *bias = s->bufs[2] >= 0 ? idk_buf_ptr(p, s->bufs[2]) : NULL;
    float *y = idk_buf_ptr(p, s->bufs[3]);
    int64_t N = s->n1, K = s->n2, Kp = s->n3, blocks = (N + GEMV_BLK - 1) / GEMV_BLK, nc = (K + GEMV_CHUNK - 1) / GEMV_CHUNK;
    int64_t *ks = s->extra, *at = ks + K + GEMV_AHEAD, nk = 0;
    int relu = s->alg & 1, skip = s->alg & 2;
    for (int64_t k = 0; k < K; k++) {
        if (k % GEMV_CHUNK == 0) at[k / GEMV_CHUNK] = nk;
        if (!skip || x[k] != 0) ks[nk++] = k;
    }
    at[nc] = nk;
    for (int i = 0; i < GEMV_AHEAD; i++) ks[nk + i] = nk ? ks[nk - 1] : 0;
    int avx512 = !(s->alg & 4), nth = s->one_thread ? 1 : p->threads;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        const float *wb = w + b * Kp * GEMV_BLK;
        if (avx512)
            gemv_block_avx512(wb, x, ks, at, nc, bias, y, b * GEMV_BLK, N, relu);
        else
            gemv_block_generic(wb, x, ks, at, nc, bias, y, b * GEMV_BLK, N, relu);
    }
    return IDK_OK;
}

/* lower_gemv lowers a Linear layer at one row (a classifier at batch 1: x 1 x K, constant
 * weights N x K as PyTorch exports them, Gemm transB=1; a bias; at most a ReLU after) to
 * fn_gemv, its weights re-laid out once into GEMV_BLK-row blocks (AB16b64a): memory-bound
 * (AlexNet's 9216->4096 layer reads 151 MB), it streams them faster than oneDNN's matmul
 * (brgemm on weights packed BA16a64b) and than dot products along the rows (see
 * benchmarks/README.md). IDK_GEMV=0 keeps oneDNN's. Returns IDK_ERR_UNSUPPORTED, having added
 * nothing, where it does not apply. */
static idk_status_t lower_gemv(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *a = T(0), *b = T(1), *o = OUT;
    if (env_off("IDK_GEMV") || p->prec != IDK_F32 || op->ni != 2 || op->ia[0] || !op->ia[1] || op->fa[0] != 1.0f ||
        o->ndims != 2 || a->dims[0] != 1 || !b->cdata || b->dtype != IDK_F32 || b->ndims != 2 || b->dims[1] != a->dims[1] ||
        b->dims[0] != o->dims[1])
        return IDK_ERR_UNSUPPORTED;
    int relu = 0;
    for (int i = 0; i < op->npost; i++) {
        const idk_post_t *q = &op->post[i];
        if (q->kind != IDK_POST_ELTWISE || q->alg != IDK_ELT_RELU || q->alpha != 0 || relu) return IDK_ERR_UNSUPPORTED;
        relu = 1;
    }
    if (op->nin == 3 && (int64_t)idk_tensor_volume(T(2)) != o->dims[1]) return IDK_ERR_UNSUPPORTED;
    dnnl_memory_desc_t wmd;
    dnnl_dims_t wd = {b->dims[0], b->dims[1]};
    if (dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dnnl_f32, dnnl_AB16b64a) != dnnl_success)
        return idk_fail(p, IDK_ERR_DNNL, "op %d: gemv weights layout", p->cur_op);
    int xb, wb, cb = -1, yb;
    if (idk_get_plain(p, op->in[0], &xb) != 0 || idk_get_view(p, op->in[1], &wmd, &wb) != 0 ||
        (op->nin == 3 && idk_get_plain(p, op->in[2], &cb) != 0) || (yb = new_out(p, op->out[0], NULL)) < 0)
        return idk_fail(p, IDK_ERR_NOMEM, "op %d: gemv buffers", p->cur_op);
    idk_step_t *s = idk_new_step(p);
    if (!s) return idk_fail(p, IDK_ERR_NOMEM, "op %d: gemv step", p->cur_op);
    s->fn = fn_gemv;
    s->nb = 4;
    s->bufs[0] = xb;
    s->bufs[1] = wb;
    s->bufs[2] = cb;
    s->bufs[3] = yb;
    s->n1 = o->dims[1];
    s->n2 = a->dims[1];
    s->n3 = wmd.padded_dims[1];
    if (!(s->extra = malloc(sizeof(int64_t) * (size_t)(s->n2 + GEMV_AHEAD + s->n2 / GEMV_CHUNK + 2))))
        return idk_fail(p, IDK_ERR_NOMEM, "op %d: gemv indices", p->cur_op);
    int finite = !env_off("IDK_GEMV_SKIP");
    const float *wv = b->cdata;
    for (int64_t i = 0, n = b->dims[0] * b->dims[1]; finite && i < n; i++) finite = isfinite(wv[i]);
    /* bit 2: the generic code, where the CPU lacks AVX-512 or IDK_GEMV_AVX512=0 (for the
     * test that both give the same bytes) */
    int generic = !__builtin_cpu_supports("avx512f") || env_off("IDK_GEMV_AVX512");
    s->alg = relu | finite << 1 | generic << 2;
    return IDK_OK;
}

static idk_status_t lower_matmul(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *a = T(0), *b = T(1), *o = OUT;
    int nd = o->ndims;
    int perm = op->ni > 2; /* operands read, and the output written, through permutations */
    idk_status_t gr = lower_gemv(p, op);
    if (gr != IDK_ERR_UNSUPPORTED) return gr;
    dnnl_memory_desc_t amd, bmd, cmd, dmd, ymd;
    dnnl_dims_t ad, bd, as, bs;
    for (int k = 0; k < 2; k++) {
        const idk_tensor_t *x = k ? b : a;
        int tr = (int)op->ia[k];
        dnnl_dim_t *dd = k ? bd : ad, *ss = k ? bs : as;
        int64_t st[IDK_MAX_DIMS], s = 1;
        for (int i = nd - 1; i >= 0; i--) {
            st[i] = s;
            s *= x->dims[i] ? x->dims[i] : 1;
        }
        for (int i = 0; i < nd; i++) {
            int64_t src = perm ? op->ia[2 + k * nd + i] : i;
            dd[i] = x->dims[src];
            ss[i] = st[src];
        }
        if (tr) {
            dd[nd - 2] = x->dims[nd - 1];
            dd[nd - 1] = x->dims[nd - 2];
            ss[nd - 2] = st[nd - 1];
            ss[nd - 1] = st[nd - 2];
        }
        dnnl_memory_desc_init_by_strides(k ? &bmd : &amd, nd, dd, dnnl_f32, ss);
    }
    dims_md(&ymd, nd, o->dims);
    dmd = ymd;
    if (perm) { /* the product's dims, strided over y's row-major bytes */
        int64_t yst[IDK_MAX_DIMS], s = 1;
        dnnl_dims_t pd_, ps;
        for (int i = nd - 1; i >= 0; i--) {
            yst[i] = s;
            s *= o->dims[i] ? o->dims[i] : 1;
        }
        for (int j = 0; j < nd; j++) {
            pd_[op->ia[2 + 2 * nd + j]] = o->dims[j];
            ps[op->ia[2 + 2 * nd + j]] = yst[j];
        }
        dnnl_memory_desc_init_by_strides(&dmd, nd, pd_, dnnl_f32, ps);
    }
    /* constant weights: let the primitive pick a packed layout, reordered once now */
    int pack_b = p->t[op->in[1]].cdata != NULL && !perm;
    for (int i = 0; i < nd - 2; i++)
        if (bd[i] != 1) pack_b = 0;
    dnnl_memory_desc_t bmd_logical = bmd;
    /* bf16 plans: a and the packed weights in bf16 (same strides), the output stays f32 */
    dnnl_data_type_t dt = pack_b ? compute_dt(p) : dnnl_f32;
    if (dt != dnnl_f32) dnnl_memory_desc_init_by_strides(&amd, nd, ad, dt, as);
    if (pack_b) dnnl_memory_desc_init_by_tag(&bmd, nd, bd, dt, dnnl_format_tag_any);
    int has_bias = op->nin == 3;
    if (has_bias) dims_md(&cmd, nd, T(2)->dims);
    int db;
    if (idk_tensor_volume(o) == 0) return new_out(p, op->out[0], &dmd) < 0 ? IDK_ERR_NOMEM : IDK_OK;
    if (ad[nd - 1] == 0) return idk_fail(p, IDK_ERR_UNSUPPORTED, "op %d: matmul with K = 0", p->cur_op);
    dnnl_matmul_desc_t d;
    dnnl_status_t ds = dnnl_matmul_desc_init(&d, &amd, &bmd, has_bias ? &cmd : NULL, &dmd);
    if (ds != dnnl_success) return dnnl_err(p, "matmul desc", ds);
    dnnl_primitive_attr_t attr = new_attr();
    if (op->fa[0] != 1.0f) dnnl_primitive_attr_set_output_scales(attr, 1, 0, &op->fa[0]);
    int sum_tid;
    idk_status_t rc = with_post_ops(p, op, attr, &sum_tid);
    if (rc != IDK_OK) {
        dnnl_primitive_attr_destroy(attr);
        return rc;
    }
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL);
    int plain[3] = {0, 0, 0};
    if (ds == dnnl_success && perm) {
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
            strncmp(impl, "ref", 3) == 0) {
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
        }
    }
    if (perm && (ds != dnnl_success || !pd)) {
        pd = matmul_plain_pd(p, &amd, &bmd, has_bias ? &cmd : NULL, &dmd, attr, plain);
        ds = pd ? dnnl_success : dnnl_unimplemented;
    }
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return dnnl_err(p, "matmul primitive desc", ds);
    int ab, bb, cb = -1;
    rc = IDK_ERR_DNNL;
    if ((dt == dnnl_f32 ? idk_get_plain(p, op->in[0], &ab) : idk_get_view(p, op->in[0], &amd, &ab)) != 0 ||
        idk_get_plain(p, op->in[1], &bb) != 0)
        goto out;
    if (pack_b) {
        bmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (!dnnl_memory_desc_equal(&bmd, &bmd_logical)) {
            if (first_view(p, op->in[1], &bmd_logical) != 0) goto out;
            idk_tensor_t *wt = &p->t[op->in[1]];
            /* reorder from the logical (possibly transposed) view */
            for (int v = 0; v < wt->nviews; v++)
                if (dnnl_memory_desc_equal(&wt->views[v].md, &bmd_logical) && v != 0) {
                    idk_view_t tmp = wt->views[0];
                    wt->views[0] = wt->views[v];
                    wt->views[v] = tmp;
                }
            if (idk_get_view(p, op->in[1], &bmd, &bb) != 0) goto out;
        }
    }
    if (has_bias && idk_get_plain(p, op->in[2], &cb) != 0) goto out;
    if (perm) {
        /* y is registered plain (its own dims); the step writes it through dmd */
        db = new_out(p, op->out[0], &ymd);
        if (db < 0) goto out;
        int xb[2] = {ab, bb};
        for (int k = 0; k < 2; k++) {
            if (!plain[k]) continue;
            /* the reference kernel's fallback: the permuted operand copied plain first */
            dnnl_memory_desc_t smd;
            dnnl_dims_t *dd = k ? &bd : &ad, *ss = k ? &bs : &as;
            dnnl_memory_desc_init_by_strides(&smd, nd, *dd, dnnl_f32, *ss);
            int tb = idk_new_buffer(p, dnnl_memory_desc_get_size(k ? &bmd : &amd));
            if (tb < 0 || reorder_step(p, &smd, xb[k], k ? &bmd : &amd, tb) != IDK_OK) goto out;
            xb[k] = tb;
        }
        ab = xb[0];
        bb = xb[1];
        int pb_ = db;
        if (plain[2] && (pb_ = idk_new_buffer(p, dnnl_memory_desc_get_size(&dmd))) < 0) goto out;
        idk_step_t *s;
        if ((rc = finish_prim(p, pd, &s)) != IDK_OK) goto out;
        idk_step_arg(s, DNNL_ARG_SRC, &amd, ab);
        idk_step_arg(s, DNNL_ARG_WEIGHTS, &bmd, bb);
        if (has_bias) idk_step_arg(s, DNNL_ARG_BIAS, &cmd, cb);
        idk_step_arg(s, DNNL_ARG_DST, &dmd, pb_);
        if (plain[2]) {
            /* the plain product reordered into y through the permutation */
            int64_t yst[IDK_MAX_DIMS], sv = 1;
            dnnl_dims_t ps;
            for (int i = nd - 1; i >= 0; i--) {
                yst[i] = sv;
                sv *= o->dims[i] ? o->dims[i] : 1;
            }
            for (int j = 0; j < nd; j++) ps[op->ia[2 + 2 * nd + j]] = yst[j];
            dnnl_memory_desc_t smd;
            dnnl_memory_desc_init_by_strides(&smd, nd, dmd.dims, dnnl_f32, ps);
            if ((rc = reorder_step(p, &dmd, pb_, &smd, db)) != IDK_OK) goto out;
        }
        rc = IDK_OK;
        goto out;
    }
    db = sum_tid >= 0 ? dst_for_sum(p, op, sum_tid, &dmd) : new_out(p, op->out[0], &dmd);
    if (db < 0) goto out;
    idk_step_t *s;
    if ((rc = finish_prim(p, pd, &s)) != IDK_OK) goto out;
    idk_step_arg(s, DNNL_ARG_SRC, &amd, ab);
    idk_step_arg(s, DNNL_ARG_WEIGHTS, &bmd, bb);
    if (has_bias) idk_step_arg(s, DNNL_ARG_BIAS, &cmd, cb);
    idk_step_arg(s, DNNL_ARG_DST, &dmd, db);
    rc = IDK_OK;
out:
    dnnl_primitive_desc_destroy(pd);
    if (rc != IDK_OK && p->err[0] == 0) idk_fail(p, rc, "op %d: matmul lowering failed", p->cur_op);
    return rc;
}

/* relu_follows reports whether op opi+1 is a plain ReLU that is the only reader of op opi's
 * output (not a graph output): oneDNN's batch normalization can apply it itself. */
static int relu_follows(idk_plan_t *p, int opi) {
    if (opi + 1 >= p->nops) return 0;
    const idk_op_t *op = &p->ops[opi], *nx = &p->ops[opi + 1];
    const idk_tensor_t *y = &p->t[op->out[0]];
    return nx->kind == IDK_OP_ELTWISE && nx->nin == 1 && nx->in[0] == op->out[0] && nx->ia[0] == IDK_ELT_RELU &&
           nx->fa[0] == 0.0f && y->lastuse == opi + 1 && !y->is_out && !p->t[nx->out[0]].is_in;
}

static idk_status_t lower_bnorm(idk_plan_t *p, const idk_op_t *op) {
    idk_view_t *v;
    idk_primary(p, op->in[0], &v);
    dnnl_memory_desc_t md = v->md, pm;
    int xb = v->buf;
    int relu = relu_follows(p, p->cur_op);
    dnnl_batch_normalization_desc_t d;
    dnnl_status_t ds = dnnl_batch_normalization_forward_desc_init(
        &d, dnnl_forward_inference, &md, op->fa[0],
        dnnl_use_global_stats | dnnl_use_scale | dnnl_use_shift | (relu ? dnnl_fuse_norm_relu : 0));
    if (ds != dnnl_success) return dnnl_err(p, "bnorm desc", ds);
    dnnl_primitive_attr_t attr = new_attr();
    dnnl_primitive_desc_t pd;
    ds = dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return dnnl_err(p, "bnorm primitive desc", ds);
    int pbuf[4];
    idk_status_t rc = IDK_ERR_DNNL;
    for (int i = 0; i < 4; i++)
        if (idk_get_plain(p, op->in[1 + i], &pbuf[i]) != 0) goto out;
    int db = new_out(p, op->out[0], &md);
    idk_step_t *s;
    if (db < 0 || (rc = finish_prim(p, pd, &s)) != IDK_OK) goto out;
    dims_md(&pm, 1, &OUT->dims[1]);
    idk_step_arg(s, DNNL_ARG_SRC, &md, xb);
    idk_step_arg(s, DNNL_ARG_SCALE, &pm, pbuf[0]);
    idk_step_arg(s, DNNL_ARG_SHIFT, &pm, pbuf[1]);
    idk_step_arg(s, DNNL_ARG_MEAN, &pm, pbuf[2]);
    idk_step_arg(s, DNNL_ARG_VARIANCE, &pm, pbuf[3]);
    idk_step_arg(s, DNNL_ARG_DST, &md, db);
    if (relu) p->ops[p->cur_op + 1].fused = 1;
    rc = IDK_OK;
out:
    dnnl_primitive_desc_destroy(pd);
    if (rc != IDK_OK && p->err[0] == 0) idk_fail(p, rc, "op %d: bnorm lowering failed", p->cur_op);
    return rc;
}

static idk_status_t fn_concat(idk_plan_t *p, idk_step_t *s) {
    /* n1 = outer, extra[k] = inner bytes of input k, bytes = inner bytes of the output */
    char *o = idk_buf_ptr(p, s->bufs[s->nb - 1]);
    for (int64_t i = 0; i < s->n1; i++) {
        for (int k = 0; k < s->nb - 1; k++) {
            int64_t w = s->extra[k];
            memcpy(o, (char *)idk_buf_ptr(p, s->bufs[k]) + i * w, (size_t)w);
            o += w;
        }
    }
    return IDK_OK;
}

/* concat_in_place lowers a concatenation without copying where every input is one contiguous
 * byte range of the output: plain tensors with nothing but 1s before the axis, or 4-D nChw16c
 * ones at batch 1 joined on channels in multiples of 16. Each input's buffer becomes an alias
 * of its range of the output's (idk_buf_alias), so the op that wrote it wrote the output;
 * an input already an alias within an earlier concatenation's output brings that whole output
 * along when it is a run of this one's inputs in place (DenseNet: each layer concatenates the
 * block's input and every earlier layer's 32 channels, so the block's concatenations nest as
 * prefixes of its last one, one buffer for all). Inputs that cannot move there (a constant, a
 * graph input, one written elsewhere or twice) are copied into their range. At batch 1 the
 * copies cost DenseNet-121 9.3 ms of 42 (per-primitive minimum sum, DNNL_VERBOSE, 2 threads),
 * and its plain-layout fallback for mixed input layouts ran every batch normalization in
 * oneDNN's ncsp kernel (10 ms more). *done is 0 when it does not apply (nothing added).
 * IDK_CONCAT_INPLACE=0 turns it off, for comparison. */
static idk_status_t concat_in_place(idk_plan_t *p, const idk_op_t *op, int *done) {
    const idk_tensor_t *o = OUT;
    int ax = (int)op->ia[0], n = op->nin;
    *done = 0;
    if (env_off("IDK_CONCAT_INPLACE") || p->prec != IDK_F32 || o->dtype != IDK_F32 || idk_tensor_volume(o) == 0)
        return IDK_OK;
    for (int i = 0; i < ax; i++)
        if (o->dims[i] != 1) return IDK_OK;
    /* the layout: plain if every input is, else nChw16c if possible and at most half the output
     * is still to be reordered into it or one input will be in a later concatenation too
     * (otherwise, concatenations of nhwc tensors stay oneDNN's, in nhwc: the convolutions
     * after them read nhwc) */
    int allplain = 1, c16 = o->ndims == 4 && ax == 1;
    size_t reorder = 0;
    for (int k = 0; k < n; k++) {
        const idk_tensor_t *x = T(k);
        idk_view_t *v;
        if (x->dtype != IDK_F32 || idk_primary(p, op->in[k], &v) != 0 || v->md.data_type != dnnl_f32) return IDK_OK;
        allplain &= v->plain;
        if (c16 && x->dims[1] % 16 == 0) {
            dnnl_memory_desc_t bm;
            dnnl_dims_t d = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
            dnnl_memory_desc_init_by_tag(&bm, 4, d, dnnl_f32, dnnl_nChw16c);
            int has = 0;
            for (int j = 0; j < x->nviews; j++) has |= dnnl_memory_desc_equal(&x->views[j].md, &bm);
            if (!has) reorder += x->nbytes;
        } else {
            c16 = 0;
        }
    }
    /* an input a later concatenation reads too will be there already, reordered once (a
     * DenseNet block's input and layers, nhwc past the Winograd stages) */
    for (int k = 0; k < n && c16 && 2 * reorder > o->nbytes; k++)
        for (int j = p->cur_op + 1; j < p->nops && 2 * reorder > o->nbytes; j++)
            if (p->ops[j].kind == IDK_OP_CONCAT)
                for (int i = 0; i < p->ops[j].nin; i++)
                    if (p->ops[j].in[i] == op->in[k]) reorder = 0;
    if (!allplain && !(c16 && 2 * reorder <= o->nbytes)) return IDK_OK;
    dnnl_memory_desc_t omd, smd[IDK_MAX_IN];
    dnnl_dims_t d;
    for (int i = 0; i < o->ndims; i++) d[i] = o->dims[i];
    if (allplain) idk_plain_md(&omd, o->ndims, o->dims);
    else dnnl_memory_desc_init_by_tag(&omd, 4, d, dnnl_f32, dnnl_nChw16c);
    /* every input's range of the output: its volume (times H*W per channel, for nChw16c, whose
     * 16-channel blocks follow each other at batch 1) after the ones before it */
    size_t at[IDK_MAX_IN], sz[IDK_MAX_IN], pos = 0;
    int b[IDK_MAX_IN], root[IDK_MAX_IN];
    size_t roff[IDK_MAX_IN];
    for (int k = 0; k < n; k++) {
        const idk_tensor_t *x = T(k);
        if (allplain) {
            idk_plain_md(&smd[k], x->ndims, x->dims);
        } else {
            dnnl_dims_t xd = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
            dnnl_memory_desc_init_by_tag(&smd[k], 4, xd, dnnl_f32, dnnl_nChw16c);
        }
        at[k] = pos;
        sz[k] = dnnl_memory_desc_get_size(&smd[k]);
        pos += sz[k];
        b[k] = -1;
        if (sz[k] > 0 && idk_get_view(p, op->in[k], &smd[k], &b[k]) != 0) return IDK_ERR_DNNL;
    }
    if (pos != dnnl_memory_desc_get_size(&omd))
        return idk_fail(p, IDK_ERR_INVALID, "op %d: concatenation of %zu bytes into %zu", p->cur_op, pos,
                        (size_t)dnnl_memory_desc_get_size(&omd));
    int ob = new_out(p, op->out[0], &omd);
    if (ob < 0) return IDK_ERR_NOMEM;
    for (int k = 0; k < n; k++) {
        roff[k] = 0;
        root[k] = sz[k] > 0 ? idk_buf_root(p, b[k], &roff[k]) : -1;
    }
    /* buffers no alias may take over: constants' and graph inputs' */
    for (int k = 0; k < n; k++) {
        if (root[k] < 0 || root[k] == ob) continue;
        int r = root[k], ok = !p->b[r].ext;
        for (int i = 0; i < p->nin && ok; i++) {
            size_t io = 0;
            ok = idk_buf_root(p, p->t[p->in[i]].views[0].buf, &io) != r;
        }
        /* the inputs within r must all land where r's offsets put them, and fill r */
        size_t base = at[k] >= roff[k] ? at[k] - roff[k] : (size_t)-1, filled = 0;
        ok &= base != (size_t)-1;
        for (int j = 0; j < n && ok; j++) {
            if (root[j] != r) continue;
            ok = at[j] == base + roff[j];
            filled += sz[j];
        }
        ok = ok && filled == p->b[r].size && idk_buf_alias(p, r, ob, base) == 0;
        for (int j = k; j < n; j++)
            if (root[j] == r) root[j] = ok ? ob : -2; /* -2: copy it */
    }
    /* the rest: copied (reordered, oneDNN's threaded copy) into their ranges */
    for (int k = 0; k < n; k++) {
        if (sz[k] == 0) continue;
        if (root[k] == ob) {
            size_t off = 0;
            idk_buf_root(p, b[k], &off);
            if (off == at[k]) continue; /* in place */
        }
        int c = idk_new_buffer(p, sz[k]);
        if (c < 0 || idk_buf_alias(p, c, ob, at[k]) != 0) return IDK_ERR_NOMEM;
        idk_status_t rc = reorder_step(p, &smd[k], b[k], &smd[k], c);
        if (rc != IDK_OK) return rc;
    }
    *done = 1;
    return IDK_OK;
}

/* concat_by_reorders lowers a channel concatenation of 4-D inputs in different layouts (nhwc,
 * nChw16c, nchw) as one reorder per input straight into its channels of the output, in the
 * layout most of the input bytes have (nChw16c only with channel counts in multiples of 16).
 * oneDNN's concat takes only its reference kernel for mixed layouts, and the plain fallback
 * reorders each input to nchw, copies them, and the next convolution reorders the result
 * again (SqueezeNet at batch 8, whose fire modules join a 1x1 convolution's nhwc output to a
 * Winograd 3x3 one's nChw16c: 3 ms of 57 in reorders and plain copies). *done is 0 when it
 * does not apply. */
static idk_status_t concat_by_reorders(idk_plan_t *p, const idk_op_t *op, int *done) {
    const idk_tensor_t *o = OUT;
    int n = op->nin;
    *done = 0;
    if (env_off("IDK_CONCAT_REORDERS") || o->ndims != 4 || op->ia[0] != 1 || idk_tensor_volume(o) == 0) return IDK_OK;
    static const dnnl_format_tag_t tags[3] = {dnnl_nChw16c, dnnl_nhwc, dnnl_nchw};
    double bytes[3] = {0, 0, 0};
    int c16 = 1, mixed = 0, first = -1;
    dnnl_memory_desc_t src[IDK_MAX_IN];
    int sb[IDK_MAX_IN];
    for (int k = 0; k < n; k++) {
        const idk_tensor_t *x = T(k);
        idk_view_t *v;
        if (x->dtype != IDK_F32 || idk_primary(p, op->in[k], &v) != 0 || v->md.data_type != dnnl_f32) return IDK_OK;
        int f = -1;
        for (int i = 0; i < 3 && f < 0; i++) {
            dnnl_memory_desc_t m;
            dnnl_memory_desc_init_by_tag(&m, 4, v->md.dims, dnnl_f32, tags[i]);
            if (dnnl_memory_desc_equal(&m, &v->md)) f = i;
        }
        if (f < 0) return IDK_OK;
        if (first < 0) first = f;
        mixed |= f != first;
        bytes[f] += (double)x->nbytes;
        c16 &= x->dims[1] % 16 == 0;
        src[k] = v->md;
        sb[k] = v->buf;
    }
    if (!mixed) return IDK_OK;
    int t = !c16 ? (bytes[1] >= bytes[2] ? 1 : 2) : bytes[0] >= bytes[1] && bytes[0] >= bytes[2] ? 0 : bytes[1] >= bytes[2] ? 1 : 2;
    dnnl_memory_desc_t full, sub[IDK_MAX_IN];
    dnnl_dims_t od = {o->dims[0], o->dims[1], o->dims[2], o->dims[3]};
    dnnl_memory_desc_init_by_tag(&full, 4, od, dnnl_f32, tags[t]);
    dnnl_primitive_desc_t pd[IDK_MAX_IN];
    int64_t at = 0;
    idk_status_t rc = IDK_OK;
    int made = 0;
    for (int k = 0; k < n && rc == IDK_OK; k++, made++) {
        const idk_tensor_t *x = T(k);
        dnnl_dims_t d = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]}, off = {0, at, 0, 0};
        at += x->dims[1];
        if (dnnl_memory_desc_init_submemory(&sub[k], &full, d, off) != dnnl_success ||
            dnnl_reorder_primitive_desc_create(&pd[k], &src[k], p->eng, &sub[k], p->eng, NULL) != dnnl_success) {
            rc = IDK_ERR_UNSUPPORTED;
            break;
        }
        if (pd_is_ref(pd[k])) rc = IDK_ERR_UNSUPPORTED;
    }
    if (rc == IDK_OK) {
        int ob = new_out(p, op->out[0], &full);
        if (ob < 0) rc = IDK_ERR_NOMEM;
        for (int k = 0; k < n && rc == IDK_OK; k++) {
            idk_step_t *s;
            if ((rc = finish_prim(p, pd[k], &s)) != IDK_OK) break;
            idk_step_arg(s, DNNL_ARG_FROM, &src[k], sb[k]);
            idk_step_arg(s, DNNL_ARG_TO, &sub[k], ob);
        }
        *done = rc == IDK_OK;
    }
    for (int k = 0; k < made; k++) dnnl_primitive_desc_destroy(pd[k]);
    return rc == IDK_ERR_UNSUPPORTED ? IDK_OK : rc;
}

static idk_status_t lower_concat(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *o = OUT;
    int ax = (int)op->ia[0];
    if (o->dtype == IDK_F32) {
        int done;
        idk_status_t rc = concat_in_place(p, op, &done);
        if (rc != IDK_OK || done) return rc;
        if ((rc = concat_by_reorders(p, op, &done)) != IDK_OK || done) return rc;
    }
    if (o->dtype == IDK_F32 && idk_tensor_volume(o) > 0) {
        dnnl_memory_desc_t mds[IDK_MAX_IN], dst;
        int bufs[IDK_MAX_IN], n = 0;
        for (int k = 0; k < op->nin; k++) {
            if (idk_tensor_volume(T(k)) == 0) continue;
            idk_view_t *v;
            idk_primary(p, op->in[k], &v);
            mds[n] = v->md;
            bufs[n++] = v->buf;
        }
        int same = 1;
        for (int k = 1; k < n; k++) same &= mds[k].data_type == mds[0].data_type;
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 0)
                any_md_dt(&dst, o, same && n > 0 ? mds[0].data_type : dnnl_f32);
            else
                idk_plain_md(&dst, o->ndims, o->dims);
            dnnl_primitive_attr_t attr = new_attr();
            dnnl_primitive_desc_t pd;
            dnnl_status_t ds = dnnl_concat_primitive_desc_create(&pd, &dst, n, ax, mds, attr, p->eng);
            dnnl_primitive_attr_destroy(attr);
            if (ds == dnnl_success && pass == 0 && pd_is_ref(pd)) {
                /* inputs of different layouts (ShuffleNet's nchw and nhwc halves), or a
                 * destination layout oneDNN chose that its fast concat does not write
                 * (ViT's class token before its patches): only its reference kernel
                 * takes them; every input and the output plain take its memcpy one */
                dnnl_primitive_desc_destroy(pd);
                ds = dnnl_unimplemented;
            }
            if (ds != dnnl_success) {
                if (pass == 1) return dnnl_err(p, "concat primitive desc", ds);
                /* retry with every input plain */
                for (int k = 0, j = 0; k < op->nin; k++) {
                    if (idk_tensor_volume(T(k)) == 0) continue;
                    if (idk_get_plain(p, op->in[k], &bufs[j]) != 0) return IDK_ERR_DNNL;
                    idk_plain_md(&mds[j], T(k)->ndims, T(k)->dims);
                    j++;
                }
                continue;
            }
            dnnl_memory_desc_t dmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
            int db = new_out(p, op->out[0], &dmd);
            idk_step_t *s;
            idk_status_t rc = db < 0 ? IDK_ERR_NOMEM : finish_prim(p, pd, &s);
            if (rc == IDK_OK) {
                for (int k = 0; k < n; k++) idk_step_arg(s, DNNL_ARG_MULTIPLE_SRC + k, &mds[k], bufs[k]);
                idk_step_arg(s, DNNL_ARG_DST, &dmd, db);
            }
            dnnl_primitive_desc_destroy(pd);
            return rc;
        }
    }
    /* plain C loop (int64, or empty) */
    int bufs[IDK_MAX_IN];
    for (int k = 0; k < op->nin; k++)
        if (idk_get_plain(p, op->in[k], &bufs[k]) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn_concat;
    s->extra = calloc((size_t)op->nin, sizeof(int64_t));
    if (!s->extra) return IDK_ERR_NOMEM;
    int64_t outer = 1;
    for (int i = 0; i < ax; i++) outer *= o->dims[i];
    s->n1 = outer;
    for (int k = 0; k < op->nin; k++) {
        int64_t inner = idk_esz(o->dtype);
        for (int i = ax; i < o->ndims; i++) inner *= T(k)->dims[i];
        s->extra[k] = inner;
        s->bufs[k] = bufs[k];
    }
    s->bufs[op->nin] = db;
    s->nb = op->nin + 1;
    return IDK_OK;
}

static idk_status_t lower_reshape(idk_plan_t *p, const idk_op_t *op) {
    int b;
    if (idk_get_plain(p, op->in[0], &b) != 0) return IDK_ERR_DNNL;
    if (idk_set_output(p, op->out[0], NULL, 1, b) != 0) return idk_fail(p, IDK_ERR_INVALID, "op %d: output written twice", p->cur_op);
    return IDK_OK;
}

/* fn_strided copies a strided view of the input into a plain output, row by row (whole
 * rows by memcpy where the source row is contiguous), rows split across the plan's threads */
static idk_status_t fn_strided(idk_plan_t *p, idk_step_t *s) {
    const char *src = idk_buf_ptr(p, s->bufs[0]);
    char *dst = idk_buf_ptr(p, s->bufs[1]);
    int nd = s->nd, esz = s->esz;
    int64_t total = 1;
    for (int i = 0; i < nd; i++) total *= s->d[i];
    if (total == 0) return IDK_OK;
    int64_t inner = s->d[nd - 1], isa = s->sa[nd - 1], rows = total / inner;
    int nth = total * esz >= 131072 && rows > 1 && p->threads > 1 ? p->threads : 1;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = s->base, q = r;
        for (int k = nd - 2; k >= 0; k--) {
            off += (q % s->d[k]) * s->sa[k];
            q /= s->d[k];
        }
        char *o = dst + r * inner * esz;
        const char *x = src + off * esz;
        if (isa == 1) {
            memcpy(o, x, (size_t)(inner * esz));
        } else if (esz == 4) {
            float *of = (float *)o;
            const float *xf = (const float *)x;
            for (int64_t i = 0; i < inner; i++) of[i] = xf[i * isa];
        } else {
            for (int64_t i = 0; i < inner; i++) memcpy(o + i * esz, x + i * isa * esz, (size_t)esz);
        }
    }
    return IDK_OK;
}

static idk_status_t strided_step(idk_plan_t *p, const idk_op_t *op, const int64_t *st, int64_t base) {
    const idk_tensor_t *o = OUT;
    int ib;
    if (idk_get_plain(p, op->in[0], &ib) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn_strided;
    s->nb = 2;
    s->bufs[0] = ib;
    s->bufs[1] = db;
    s->nd = o->ndims;
    s->esz = idk_esz(o->dtype);
    s->base = base;
    for (int i = 0; i < o->ndims; i++) {
        s->d[i] = o->dims[i];
        s->sa[i] = st[i];
    }
    if (s->nd > 0) merge_dims(s); /* sb is all 0: merges where the source strides allow */
    return IDK_OK;
}

static void row_strides(const idk_tensor_t *x, int64_t *st) {
    int64_t s = 1;
    for (int i = x->ndims - 1; i >= 0; i--) {
        st[i] = s;
        s *= x->dims[i];
    }
}

/* channels_last_transpose lowers a 4-D f32 Transpose between channels-first and
 * channels-last (ConvNeXt's permutes around each block's LayerNorm and Linear layers, and
 * its stem's and downsamplings' LayerNorm2d) without a copy of its own:
 * - perm (0,2,3,1): the output, plain, is the input stored nhwc; an input held in another
 *   layout (a depthwise convolution's nChw16c) is reordered into it in one oneDNN reorder,
 *   not two (to plain, then the transpose);
 * - perm (0,3,1,2): the output is the input's plain buffer seen as nhwc (no step); its
 *   readers (ConvNeXt: the layer scale's Mul, the residual Add, the next depthwise
 *   convolution's reorder to nChw16c) take that layout, and a reader that needs it plain
 *   gets the reorder the transpose did before.
 * Not for constants or graph inputs (the output would share their buffer). Returns 1 if
 * lowered, 0 if not its case, -1 on error. IDK_CL_TRANSPOSE=0 keeps the copies. */
static int channels_last_transpose(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *o = OUT;
    if (env_off("IDK_CL_TRANSPOSE") || o->ndims != 4 || o->dtype != IDK_F32 || x->cdata || x->is_in ||
        idk_tensor_volume(o) == 0 || op->ia[0] != 0)
        return 0;
    int toward = op->ia[1] == 2 && op->ia[2] == 3 && op->ia[3] == 1;
    int back = op->ia[1] == 3 && op->ia[2] == 1 && op->ia[3] == 2;
    if (!toward && !back) return 0;
    dnnl_dims_t d;
    dnnl_memory_desc_t nhwc;
    int b;
    if (toward) {
        for (int i = 0; i < 4; i++) d[i] = x->dims[i];
        dnnl_memory_desc_init_by_tag(&nhwc, 4, d, dnnl_f32, dnnl_nhwc);
        if (idk_get_view(p, op->in[0], &nhwc, &b) != 0) return -1;
        return idk_set_output(p, op->out[0], NULL, 1, b) == 0 ? 1 : -1;
    }
    for (int i = 0; i < 4; i++) d[i] = o->dims[i];
    dnnl_memory_desc_init_by_tag(&nhwc, 4, d, dnnl_f32, dnnl_nhwc);
    if (idk_get_plain(p, op->in[0], &b) != 0) return -1;
    return idk_set_output(p, op->out[0], &nhwc, 0, b) == 0 ? 1 : -1;
}

static idk_status_t lower_transpose(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *o = OUT;
    /* a permutation that only moves dims of size 1 keeps the bytes in order: its buffer
     * (ViT's (1, L, D) <-> (L, 1, D) around attention) */
    int64_t last = -1;
    int same = 1;
    for (int i = 0; i < o->ndims && same; i++) {
        if (x->dims[op->ia[i]] == 1) continue;
        same = op->ia[i] > last;
        last = op->ia[i];
    }
    if (same) return lower_reshape(p, op);
    int cl = channels_last_transpose(p, op);
    if (cl != 0) return cl > 0 ? IDK_OK : IDK_ERR_DNNL;
    int64_t xs[IDK_MAX_DIMS], st[IDK_MAX_DIMS];
    row_strides(x, xs);
    for (int i = 0; i < o->ndims; i++) st[i] = xs[op->ia[i]];
    if (o->dtype != IDK_F32 || idk_tensor_volume(o) == 0 || o->ndims == 0) return strided_step(p, op, st, 0);
    dnnl_memory_desc_t smd, dmd;
    dnnl_dims_t d, s;
    for (int i = 0; i < o->ndims; i++) {
        d[i] = o->dims[i];
        s[i] = st[i];
    }
    dnnl_memory_desc_init_by_strides(&smd, o->ndims, d, dnnl_f32, s);
    idk_plain_md(&dmd, o->ndims, o->dims);
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, &smd, p->eng, &dmd, p->eng, NULL) != dnnl_success)
        return strided_step(p, op, st, 0);
    int ib;
    idk_status_t rc = IDK_ERR_DNNL;
    if (idk_get_plain(p, op->in[0], &ib) == 0) {
        int db = new_out(p, op->out[0], &dmd);
        idk_step_t *sp;
        if (db >= 0 && (rc = finish_prim(p, pd, &sp)) == IDK_OK) {
            idk_step_arg(sp, DNNL_ARG_FROM, &smd, ib);
            idk_step_arg(sp, DNNL_ARG_TO, &dmd, db);
        }
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

static idk_status_t lower_slice(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *o = OUT;
    int64_t xs[IDK_MAX_DIMS], st[IDK_MAX_DIMS], base = 0;
    int whole = same_dims(x, o);
    for (int i = 0; i < o->ndims; i++) whole = whole && op->ia[o->ndims + i] == 1;
    if (whole) return lower_reshape(p, op); /* the whole tensor (Swin's exports slice so): its buffer */
    row_strides(x, xs);
    for (int i = 0; i < o->ndims; i++) {
        st[i] = xs[i] * op->ia[o->ndims + i];
        if (o->dims[i]) base += xs[i] * op->ia[i];
    }
    return strided_step(p, op, st, base);
}

static void fill_val(char *dst, int64_t n, int esz, const void *v) {
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * esz, v, (size_t)esz);
}

/* fn_pad writes the output row by row (the last dim): the value outside the input, the
 * input's row (memcpy) inside; rows split across the plan's threads */
static idk_status_t fn_pad(idk_plan_t *p, idk_step_t *s) {
    const char *src = idk_buf_ptr(p, s->bufs[0]);
    char *dst = idk_buf_ptr(p, s->bufs[1]);
    int nd = s->nd, esz = s->esz;
    const int64_t *ind = s->extra, *pb = s->extra + IDK_MAX_DIMS;
    int64_t total = 1, xs[IDK_MAX_DIMS], sv = 1;
    for (int i = nd - 1; i >= 0; i--) {
        xs[i] = sv;
        sv *= ind[i];
    }
    for (int i = 0; i < nd; i++) total *= s->d[i];
    if (total == 0) return IDK_OK;
    int64_t ival = (int64_t)s->fv;
    const void *val = esz == 4 ? (const void *)&s->fv : (const void *)&ival;
    int64_t inner = s->d[nd - 1], rows = total / inner;
    /* the output columns [lo, hi) come from input columns [lo - pb, hi - pb) */
    int64_t lo = pb[nd - 1] > 0 ? pb[nd - 1] : 0, hi = pb[nd - 1] + ind[nd - 1];
    if (hi > inner) hi = inner;
    if (hi < lo) hi = lo;
    int nth = total * esz >= 131072 && rows > 1 && p->threads > 1 ? p->threads : 1;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        char *o = dst + r * inner * esz;
        int64_t off = 0, q = r;
        int in = 1;
        for (int k = nd - 2; k >= 0; k--) {
            int64_t x = q % s->d[k] - pb[k];
            q /= s->d[k];
            if (x < 0 || x >= ind[k]) in = 0;
            off += x * xs[k];
        }
        if (!in) {
            fill_val(o, inner, esz, val);
            continue;
        }
        fill_val(o, lo, esz, val);
        if (hi > lo) memcpy(o + lo * esz, src + (off + lo - pb[nd - 1]) * esz, (size_t)((hi - lo) * esz));
        fill_val(o + hi * esz, inner - hi, esz, val);
    }
    return IDK_OK;
}

static idk_status_t lower_pad(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0), *o = OUT;
    int nopad = same_dims(x, o);
    for (int i = 0; i < o->ndims; i++) nopad = nopad && op->ia[i] == 0;
    if (nopad) return lower_reshape(p, op); /* pads of 0 (Swin's pad to whole windows): its buffer */
    int ib;
    if (idk_get_plain(p, op->in[0], &ib) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn_pad;
    s->nb = 2;
    s->bufs[0] = ib;
    s->bufs[1] = db;
    s->nd = o->ndims;
    s->esz = idk_esz(o->dtype);
    s->fv = op->fa[0];
    s->extra = calloc(2 * IDK_MAX_DIMS, sizeof(int64_t));
    if (!s->extra) return IDK_ERR_NOMEM;
    for (int i = 0; i < o->ndims; i++) {
        s->d[i] = o->dims[i];
        s->extra[i] = x->dims[i];
        s->extra[IDK_MAX_DIMS + i] = op->ia[i];
    }
    return IDK_OK;
}

static idk_status_t fn_gather(idk_plan_t *p, idk_step_t *s) {
    const char *src = idk_buf_ptr(p, s->bufs[0]);
    const int64_t *ix = idk_buf_ptr(p, s->bufs[1]);
    char *dst = idk_buf_ptr(p, s->bufs[2]);
    int64_t outer = s->n1, axis = s->n2, nidx = s->n3, inner = (int64_t)s->bytes;
    for (int64_t j = 0; j < nidx; j++)
        if (ix[j] < -axis || ix[j] >= axis)
            return idk_fail(p, IDK_ERR_RUNTIME, "gather index %lld out of range [-%lld, %lld)", (long long)ix[j],
                            (long long)axis, (long long)axis);
    for (int64_t i = 0; i < outer; i++)
        for (int64_t j = 0; j < nidx;) {
            int64_t k = ix[j] < 0 ? ix[j] + axis : ix[j], run = 1;
            /* consecutive indices are one copy (a roll lowered as a gather: two per row) */
            while (j + run < nidx && (ix[j + run] < 0 ? ix[j + run] + axis : ix[j + run]) == k + run) run++;
            memcpy(dst, src + (i * axis + k) * inner, (size_t)(inner * run));
            dst += inner * run;
            j += run;
        }
    return IDK_OK;
}

static idk_status_t lower_gather(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *d = T(0), *ix = T(1);
    int ax = (int)op->ia[0];
    int b0, b1;
    if (idk_get_plain(p, op->in[0], &b0) != 0 || idk_get_plain(p, op->in[1], &b1) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn_gather;
    s->nb = 3;
    s->bufs[0] = b0;
    s->bufs[1] = b1;
    s->bufs[2] = db;
    int64_t outer = 1, inner = idk_esz(d->dtype);
    for (int i = 0; i < ax; i++) outer *= d->dims[i];
    for (int i = ax + 1; i < d->ndims; i++) inner *= d->dims[i];
    s->n1 = outer;
    s->n2 = d->dims[ax];
    s->n3 = (int64_t)idk_tensor_volume(ix);
    s->bytes = (size_t)inner;
    return IDK_OK;
}

static idk_status_t simple_prim(idk_plan_t *p, const idk_op_t *op, const_dnnl_op_desc_t d, const dnnl_memory_desc_t *smd,
                                int sb, const dnnl_memory_desc_t *dmd_in) {
    dnnl_primitive_attr_t attr = new_attr();
    dnnl_primitive_desc_t pd;
    dnnl_status_t ds = dnnl_primitive_desc_create(&pd, d, attr, p->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success) return dnnl_err(p, "primitive desc", ds);
    dnnl_memory_desc_t dmd = dmd_in ? *dmd_in : *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    int db = new_out(p, op->out[0], &dmd);
    idk_step_t *s;
    idk_status_t rc = db < 0 ? IDK_ERR_NOMEM : finish_prim(p, pd, &s);
    if (rc == IDK_OK) {
        idk_step_arg(s, DNNL_ARG_SRC, smd, sb);
        idk_step_arg(s, DNNL_ARG_DST, &dmd, db);
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

static idk_status_t lower_softmax(idk_plan_t *p, const idk_op_t *op) {
    dnnl_memory_desc_t md;
    idk_plain_md(&md, OUT->ndims, OUT->dims);
    int sb;
    if (idk_get_plain(p, op->in[0], &sb) != 0) return IDK_ERR_DNNL;
    if (idk_tensor_volume(OUT) == 0) return new_out(p, op->out[0], &md) < 0 ? IDK_ERR_NOMEM : IDK_OK;
    dnnl_softmax_v2_desc_t d;
    dnnl_status_t ds = dnnl_softmax_v2_forward_desc_init(&d, dnnl_forward_inference,
                                                         op->ia[1] ? dnnl_softmax_log : dnnl_softmax_accurate, &md, &md,
                                                         (int)op->ia[0]);
    if (ds != dnnl_success) return dnnl_err(p, "softmax desc", ds);
    return simple_prim(p, op, &d, &md, sb, &md);
}

static idk_status_t lower_lrn(idk_plan_t *p, const idk_op_t *op) {
    idk_view_t *v;
    idk_primary(p, op->in[0], &v);
    dnnl_memory_desc_t md = v->md;
    int sb = v->buf;
    dnnl_lrn_desc_t d;
    dnnl_status_t ds = dnnl_lrn_forward_desc_init(&d, dnnl_forward_inference, dnnl_lrn_across_channels, &md, op->ia[0],
                                                  op->fa[0], op->fa[1], op->fa[2]);
    if (ds != dnnl_success) return dnnl_err(p, "lrn desc", ds);
    return simple_prim(p, op, &d, &md, sb, &md);
}

/* global_avg_pool lowers a mean over both spatial dims of a 4-D x (MnasNet's
 * x.mean([2, 3])) as average pooling over the input's own layout: a reduction primitive
 * needs it plain, and the reorder of a blocked 1x1280x7x7 to plain plus the reduction took
 * 0.17 + 0.15 ms (MnasNet batch 1, 2 threads), pooling 0.02 ms. It returns
 * IDK_ERR_UNSUPPORTED, having added nothing, where oneDNN would pool with its reference
 * kernel. */
static idk_status_t global_avg_pool(idk_plan_t *p, const idk_op_t *op) {
    const idk_tensor_t *x = T(0);
    int S = x->ndims - 2;
    dnnl_dims_t k, st, dl, pb, pe;
    for (int i = 0; i < S; i++) {
        k[i] = x->dims[2 + i];
        st[i] = 1;
        dl[i] = pb[i] = pe[i] = 0;
    }
    return pool_prim(p, op, dnnl_pooling_avg_exclude_padding, k, st, dl, pb, pe, 1);
}

static idk_status_t lower_reduce_mean(idk_plan_t *p, const idk_op_t *op) {
    dnnl_memory_desc_t smd, dmd;
    {
        const idk_tensor_t *x = T(0), *o = OUT;
        int spatial = x->ndims == 4 && o->ndims == 4 && idk_tensor_volume(o) > 0 && o->dims[0] == x->dims[0] &&
                      o->dims[1] == x->dims[1];
        for (int i = 2; spatial && i < 4; i++) spatial = o->dims[i] == 1 && x->dims[i] > 1;
        if (spatial) {
            idk_status_t rc = global_avg_pool(p, op);
            if (rc != IDK_ERR_UNSUPPORTED) return rc;
        }
    }
    idk_plain_md(&smd, T(0)->ndims, T(0)->dims);
    idk_plain_md(&dmd, OUT->ndims, OUT->dims);
    int sb;
    if (idk_get_plain(p, op->in[0], &sb) != 0) return IDK_ERR_DNNL;
    if (same_dims(T(0), OUT)) {
        int db = new_out(p, op->out[0], &dmd);
        idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
        if (!s) return IDK_ERR_NOMEM;
        s->fn = fn_copy;
        s->nb = 2;
        s->bufs[0] = sb;
        s->bufs[1] = db;
        s->bytes = OUT->nbytes;
        return IDK_OK;
    }
    if (idk_tensor_volume(T(0)) == 0) return idk_fail(p, IDK_ERR_UNSUPPORTED, "op %d: mean of an empty tensor", p->cur_op);
    dnnl_reduction_desc_t d;
    dnnl_status_t ds = dnnl_reduction_desc_init(&d, dnnl_reduction_mean, &smd, &dmd, 0.f, 0.f);
    if (ds != dnnl_success) return dnnl_err(p, "reduction desc", ds);
    return simple_prim(p, op, &d, &smd, sb, &dmd);
}

/* reduce_init and reduce_acc: one IDK_RED_* accumulation (fixed order: any thread count
 * gives the same bytes) */
static inline float reduce_init(int alg, float first) {
    return alg == IDK_RED_PROD ? 1.f : alg == IDK_RED_MAX || alg == IDK_RED_MIN ? first : 0.f;
}
static inline float reduce_acc(int alg, float a, float v) {
    switch (alg) {
    case IDK_RED_SUM: return a + v;
    case IDK_RED_MAX: return v > a || isnan(v) ? v : a;
    case IDK_RED_MIN: return v < a || isnan(v) ? v : a;
    case IDK_RED_PROD: return a * v;
    case IDK_RED_L1: return a + fabsf(v);
    default: return a + v * v; /* L2, sum of squares */
    }
}

/* fn_reduce_rows reduces x viewed as (n1, n2, n3) over its middle dim (IDK_RED_*: not
 * mean), each output element accumulated in index order; the n1 x n3 outputs split across
 * the plan's threads */
static idk_status_t fn_reduce_rows(idk_plan_t *p, idk_step_t *s) {
    const float *x = idk_buf_ptr(p, s->bufs[0]);
    float *y = idk_buf_ptr(p, s->bufs[1]);
    int64_t outer = s->n1, n = s->n2, inner = s->n3;
    int alg = s->alg;
    int nth = outer * n * inner >= 32768 && p->threads > 1 ? p->threads : 1;
    if (inner == 1) {
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int64_t r = 0; r < outer; r++) {
            const float *v = x + r * n;
            float a = reduce_init(alg, v[0]);
            for (int64_t i = alg == IDK_RED_MAX || alg == IDK_RED_MIN; i < n; i++) a = reduce_acc(alg, a, v[i]);
            y[r] = alg == IDK_RED_L2 ? sqrtf(a) : a;
        }
        return IDK_OK;
    }
    /* a middle dim (masked mean pooling's sum over tokens): rows of inner values, each
     * thread a range of columns */
    int64_t chunks = outer * ((inner + 63) / 64);
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t o = c / ((inner + 63) / 64), i0 = (c % ((inner + 63) / 64)) * 64;
        int64_t i1 = i0 + 64 < inner ? i0 + 64 : inner;
        const float *v = x + o * n * inner;
        float *out = y + o * inner;
        for (int64_t i = i0; i < i1; i++) out[i] = reduce_init(alg, v[i]);
        for (int64_t r = alg == IDK_RED_MAX || alg == IDK_RED_MIN; r < n; r++)
            for (int64_t i = i0; i < i1; i++) out[i] = reduce_acc(alg, out[i], v[r * inner + i]);
        if (alg == IDK_RED_L2)
            for (int64_t i = i0; i < i1; i++) out[i] = sqrtf(out[i]);
    }
    return IDK_OK;
}

static idk_status_t lower_reduce(idk_plan_t *p, const idk_op_t *op) {
    if (op->ia[0] == IDK_RED_MEAN) return lower_reduce_mean(p, op);
    dnnl_memory_desc_t smd, dmd;
    idk_plain_md(&smd, T(0)->ndims, T(0)->dims);
    idk_plain_md(&dmd, OUT->ndims, OUT->dims);
    int sb;
    if (idk_get_plain(p, op->in[0], &sb) != 0) return IDK_ERR_DNNL;
    int norm = op->ia[0] == IDK_RED_L1 || op->ia[0] == IDK_RED_L2 || op->ia[0] == IDK_RED_SUM_SQUARE;
    if (norm && same_dims(T(0), OUT) && idk_tensor_volume(T(0)) != 0)
        return idk_fail(p, IDK_ERR_UNSUPPORTED, "op %d: L1/L2/sum-square reduction reduces no dim (lower it element-wise)", p->cur_op);
    if (same_dims(T(0), OUT) || idk_tensor_volume(T(0)) == 0) {
        if (idk_tensor_volume(T(0)) == 0 && op->ia[0] != IDK_RED_SUM && !norm && idk_tensor_volume(OUT) != 0)
            return idk_fail(p, IDK_ERR_UNSUPPORTED, "op %d: max/min/prod of an empty tensor", p->cur_op);
        int db = new_out(p, op->out[0], &dmd);
        idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
        if (!s) return IDK_ERR_NOMEM;
        s->fn = same_dims(T(0), OUT) ? fn_copy : fn_zero;
        s->nb = 2;
        s->bufs[0] = sb;
        s->bufs[1] = db;
        s->bytes = OUT->nbytes;
        return IDK_OK;
    }
    dnnl_alg_kind_t alg = dnnl_reduction_min;
    float pw = 0.f;
    switch (op->ia[0]) {
    case IDK_RED_SUM: alg = dnnl_reduction_sum; break;
    case IDK_RED_MAX: alg = dnnl_reduction_max; break;
    case IDK_RED_PROD: alg = dnnl_reduction_mul; break;
    case IDK_RED_L1: alg = dnnl_reduction_norm_lp_sum, pw = 1.f; break;          /* sum |x| */
    case IDK_RED_L2: alg = dnnl_reduction_norm_lp_sum, pw = 2.f; break;          /* sqrt(sum x^2) */
    case IDK_RED_SUM_SQUARE: alg = dnnl_reduction_norm_lp_power_p_sum, pw = 2.f; break; /* sum x^2 */
    }
    dnnl_reduction_desc_t d;
    dnnl_status_t ds = dnnl_reduction_desc_init(&d, alg, &smd, &dmd, pw, 0.f);
    if (ds != dnnl_success) return dnnl_err(p, "reduction desc", ds);
    /* a reduction of one run of dims that oneDNN 2.6 has only its reference kernel for runs
     * as a C loop: Swin V2's cosine attention normalises rows of 32 (1.1 s of ReduceL2 in a
     * 5.7 s batch under load), the text encoder's mean pooling sums 128 tokens of 768 */
    const idk_tensor_t *x = T(0), *o = OUT;
    int k = 0, l = o->ndims - 1;
    while (k < o->ndims && o->dims[k] == x->dims[k]) k++;
    while (l >= 0 && o->dims[l] == x->dims[l]) l--;
    int run = k <= l; /* the reduced dims are one run [k, l] */
    for (int i = k; i <= l; i++) run = run && o->dims[i] == 1;
    if (run) {
        dnnl_primitive_desc_t pd;
        dnnl_primitive_attr_t attr = new_attr();
        ds = dnnl_primitive_desc_create(&pd, &d, attr, p->eng, NULL);
        dnnl_primitive_attr_destroy(attr);
        if (ds != dnnl_success) return dnnl_err(p, "primitive desc", ds);
        const char *impl = NULL;
        int ref = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
                  strncmp(impl, "ref", 3) == 0;
        dnnl_primitive_desc_destroy(pd);
        if (ref) {
            int db = new_out(p, op->out[0], &dmd);
            idk_step_t *st = db < 0 ? NULL : idk_new_step(p);
            if (!st) return IDK_ERR_NOMEM;
            st->fn = fn_reduce_rows;
            st->nb = 2;
            st->bufs[0] = sb;
            st->bufs[1] = db;
            st->alg = (int)op->ia[0];
            st->n1 = st->n2 = st->n3 = 1;
            for (int i = 0; i < k; i++) st->n1 *= x->dims[i];
            for (int i = k; i <= l; i++) st->n2 *= x->dims[i];
            for (int i = l + 1; i < x->ndims; i++) st->n3 *= x->dims[i];
            return IDK_OK;
        }
    }
    return simple_prim(p, op, &d, &smd, sb, &dmd);
}

static idk_status_t lower_copy(idk_plan_t *p, const idk_op_t *op) {
    int sb;
    if (idk_get_plain(p, op->in[0], &sb) != 0) return IDK_ERR_DNNL;
    int db = new_out(p, op->out[0], NULL);
    idk_step_t *s = db < 0 ? NULL : idk_new_step(p);
    if (!s) return IDK_ERR_NOMEM;
    s->fn = fn_copy;
    s->nb = 2;
    s->bufs[0] = sb;
    s->bufs[1] = db;
    s->bytes = OUT->nbytes;
    return IDK_OK;
}

idk_status_t idk_lower_op(idk_plan_t *p, int opi) {
    const idk_op_t *op = &p->ops[opi];
    for (int i = 0; i < op->nin; i++)
        if (p->t[op->in[i]].nviews == 0)
            return idk_fail(p, IDK_ERR_INVALID, "op %d reads tensor %d before it is written", opi, op->in[i]);
    for (int i = 0; i < op->nout; i++)
        if (p->t[op->out[i]].nviews != 0)
            return idk_fail(p, IDK_ERR_INVALID, "op %d writes tensor %d a second time", opi, op->out[i]);
    p->err[0] = 0;
    if (IDK_IS_QUANT_OP(op->kind)) return idk_lower_quant(p, op);
    switch (op->kind) {
    case IDK_OP_CONV: return lower_conv(p, op);
    case IDK_OP_POOL: return lower_pool(p, op);
    case IDK_OP_ELTWISE: return lower_eltwise(p, op);
    case IDK_OP_BINARY: return lower_binary(p, op);
    case IDK_OP_MATMUL: return lower_matmul(p, op);
    case IDK_OP_BNORM: return lower_bnorm(p, op);
    case IDK_OP_CONCAT: return lower_concat(p, op);
    case IDK_OP_RESHAPE: return lower_reshape(p, op);
    case IDK_OP_TRANSPOSE: return lower_transpose(p, op);
    case IDK_OP_SOFTMAX: return lower_softmax(p, op);
    case IDK_OP_LRN: return lower_lrn(p, op);
    case IDK_OP_PAD: return lower_pad(p, op);
    case IDK_OP_GATHER: return lower_gather(p, op);
    case IDK_OP_SLICE: return lower_slice(p, op);
    case IDK_OP_REDUCE_MEAN: return lower_reduce_mean(p, op);
    case IDK_OP_COPY:
    case IDK_OP_DROPOUT: return lower_copy(p, op); /* inference: dropout is the identity */
    case IDK_OP_CAST: return elem_step(p, op, fn_cast, (int)op->ia[0] << 1 | (OUT->dtype == IDK_F32 ? 1 : 0));
    case IDK_OP_COMPARE: return bcast_step(p, op, fn_compare, 2);
    case IDK_OP_WHERE: return bcast_step(p, op, fn_where, 3);
    case IDK_OP_EXPAND: return lower_expand(p, op);
    case IDK_OP_CUMSUM: return lower_cumsum(p, op);
    case IDK_OP_UNARY: return elem_step(p, op, fn_unary, (int)op->ia[0]);
    case IDK_OP_LAYER_NORM: return lower_layer_norm(p, op);
    case IDK_OP_REDUCE: return lower_reduce(p, op);
    case IDK_OP_ARGMAX: return lower_argmax(p, op);
    case IDK_OP_TOPK:
    case IDK_OP_RESIZE:
    case IDK_OP_MASKED_SOFTMAX: return idk_lower_modern(p, op);
    case IDK_OP_ATTENTION: return idk_lower_attention(p, op);
    }
    return idk_fail(p, IDK_ERR_INVALID, "op %d: unknown kind %d", opi, op->kind);
}

/* ---- shared with quant.c (declared in internal.h) ---- */

dnnl_primitive_attr_t idk_new_attr(void) { return new_attr(); }
idk_status_t idk_finish_prim(idk_plan_t *p, dnnl_primitive_desc_t pd, idk_step_t **out) { return finish_prim(p, pd, out); }
int idk_new_out(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md) { return new_out(p, tid, md); }
idk_status_t idk_with_post_ops(idk_plan_t *p, const idk_op_t *op, dnnl_primitive_attr_t attr, int *sum_tid) {
    return with_post_ops(p, op, attr, sum_tid);
}
int idk_dst_for_sum(idk_plan_t *p, const idk_op_t *op, int sum_tid, const dnnl_memory_desc_t *dmd) {
    return dst_for_sum(p, op, sum_tid, dmd);
}
