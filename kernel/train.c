//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* train.c: training plans: forward in training mode, softmax cross-entropy, backward
 * (oneDNN's backward primitives), batch-norm statistics and optimizers.
 *
 * A training plan is an inference plan's tensors and ops (idk_plan_add_tensor/add_op)
 * compiled by idk_train_compile instead of idk_plan_compile. Every buffer is allocated
 * once at compile time (no arena sharing: backward needs the forward's activations), and
 * every step runs in a fixed order with oneDNN's fixed-thread-count kernels, so a plan's
 * results are a function of its inputs and thread count. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl_debug.h>

#include "internal.h"

#define TR_MAX_ARGS 16
#define TR_MAX_VIEWS 6

enum { TR_ACT = 0, TR_INPUT = 3, TR_CONST = 4 }; /* TR_PARAM = IDK_TRAIN_PARAM, TR_STATE = IDK_TRAIN_STATE */

typedef struct {
    dnnl_memory_desc_t md;
    float *ptr;
} tr_view_t;

typedef struct {
    int role;
    int needs_grad;
    int grad_set; /* compile time: some backward step before this point wrote the gradient */
    int defined;
    dnnl_memory_desc_t md; /* layout of the value and of its gradient */
    float *val;
    float *grad;
    int nviews;
    tr_view_t views[TR_MAX_VIEWS];
    int64_t off; /* PARAM/STATE: offset in the flat arrays, elements */
} tr_tensor_t;

typedef struct tr_step tr_step_t;
typedef idk_status_t (*tr_fn)(idk_plan_t *p, tr_step_t *s);

struct tr_step {
    dnnl_primitive_t prim;
    int nargs;
    int akind[TR_MAX_ARGS];
    dnnl_memory_desc_t amd[TR_MAX_ARGS];
    void *aptr[TR_MAX_ARGS]; /* NULL: the scratchpad */
    dnnl_memory_t mem[TR_MAX_ARGS];
    dnnl_exec_arg_t ea[TR_MAX_ARGS];
    tr_fn fn;
    float *a, *b, *c;
    int64_t n, n1, n2, n3;
    float f;
    int op;
};

typedef struct {
    int64_t c, count;
    float mom;
    float *mean, *var;           /* the forward's batch statistics (biased variance) */
    float *run_mean, *run_var;   /* running statistics in the state array, or NULL */
    int64_t boff;                /* offset in bstats: mean (c) then unbiased variance (c) */
} tr_bn_t;

struct idk_train {
    tr_tensor_t *tt;
    int ntt;
    tr_step_t *s;
    int ns, caps, nfw;
    void **own;
    int nown, capown;
    float *params, *grads, *state, *opt1, *opt2, *bstats;
    int64_t nparams, nstate, nbstats;
    void *scratch;
    size_t scratch_size;
    int input, logits;
    int64_t N, K;
    float *logp, *dlogp;
    /* per run */
    const int64_t *labels;
    float scale;
    uint64_t seed;
    double loss;
    int64_t correct;
    tr_bn_t *bn;
    int nbn;
};

static idk_status_t dfail(idk_plan_t *p, const char *what, dnnl_status_t s) {
    return idk_fail(p, IDK_ERR_DNNL, "train op %d: %s: %s", p->cur_op, what, dnnl_status2str(s));
}

static void *tr_alloc(idk_plan_t *p, size_t bytes) {
    idk_train_t *t = p->tr;
    if (t->nown >= t->capown) {
        int nc = t->capown ? t->capown * 2 : 64;
        void **no = realloc(t->own, (size_t)nc * sizeof *no);
        if (!no) return NULL;
        t->own = no;
        t->capown = nc;
    }
    size_t sz = (bytes + 63) / 64 * 64 + 64;
    void *b = aligned_alloc(64, sz);
    if (!b) return NULL;
    memset(b, 0, sz);
    t->own[t->nown++] = b;
    return b;
}

static tr_step_t *tr_step(idk_plan_t *p) {
    idk_train_t *t = p->tr;
    if (t->ns >= t->caps) {
        int nc = t->caps ? t->caps * 2 : 64;
        tr_step_t *ns = realloc(t->s, (size_t)nc * sizeof *ns);
        if (!ns) return NULL;
        t->s = ns;
        t->caps = nc;
    }
    tr_step_t *s = &t->s[t->ns++];
    memset(s, 0, sizeof *s);
    s->op = p->cur_op;
    return s;
}

static void tr_arg(tr_step_t *s, int kind, const dnnl_memory_desc_t *md, void *ptr) {
    if (s->nargs >= TR_MAX_ARGS) return; /* never: at most 10 arguments per primitive */
    s->akind[s->nargs] = kind;
    s->amd[s->nargs] = *md;
    s->aptr[s->nargs] = ptr;
    s->nargs++;
}

static dnnl_primitive_attr_t tr_attr(void) {
    dnnl_primitive_attr_t a = NULL;
    dnnl_primitive_attr_create(&a);
    if (a) dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user);
    return a;
}

/* tr_pd creates a primitive descriptor with the user scratchpad. */
static dnnl_status_t tr_pd(idk_plan_t *p, dnnl_primitive_desc_t *pd, const void *desc, const_dnnl_primitive_desc_t hint) {
    dnnl_primitive_attr_t a = tr_attr();
    dnnl_status_t s = dnnl_primitive_desc_create(pd, desc, a, p->eng, hint);
    dnnl_primitive_attr_destroy(a);
    return s;
}

/* tr_prim turns pd into a new step with its scratchpad argument (pd is not destroyed). */
static tr_step_t *tr_prim(idk_plan_t *p, const_dnnl_primitive_desc_t pd) {
    tr_step_t *s = tr_step(p);
    if (!s) return NULL;
    if (dnnl_primitive_create(&s->prim, pd) != dnnl_success) {
        s->prim = NULL;
        idk_fail(p, IDK_ERR_DNNL, "train op %d: primitive create failed", p->cur_op);
        return NULL;
    }
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp && dnnl_memory_desc_get_size(sp) > 0) tr_arg(s, DNNL_ARG_SCRATCHPAD, sp, NULL);
    return s;
}

static const dnnl_memory_desc_t *q(const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static size_t md_size(const dnnl_memory_desc_t *md) { return dnnl_memory_desc_get_size(md); }

/* reorder_step adds a step that converts (smd, src) into (dmd, dst). */
static idk_status_t reorder_step(idk_plan_t *p, const dnnl_memory_desc_t *smd, void *src, const dnnl_memory_desc_t *dmd,
                                 void *dst) {
    dnnl_primitive_desc_t pd;
    dnnl_status_t ds = dnnl_reorder_primitive_desc_create(&pd, smd, p->eng, dmd, p->eng, NULL);
    if (ds != dnnl_success) return dfail(p, "reorder", ds);
    tr_step_t *s = tr_prim(p, pd);
    dnnl_primitive_desc_destroy(pd);
    if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    tr_arg(s, DNNL_ARG_FROM, smd, src);
    tr_arg(s, DNNL_ARG_TO, dmd, dst);
    return IDK_OK;
}

/* ---- C loops ---- */

static idk_status_t fn_copy(idk_plan_t *p, tr_step_t *s) {
    (void)p;
    memcpy(s->b, s->a, (size_t)s->n * sizeof(float));
    return IDK_OK;
}

static idk_status_t fn_zero(idk_plan_t *p, tr_step_t *s) {
    (void)p;
    memset(s->a, 0, (size_t)s->n * sizeof(float));
    return IDK_OK;
}

/* fn_acc: b += a, elementwise (a fixed order per element: deterministic). */
static idk_status_t fn_acc(idk_plan_t *p, tr_step_t *s) {
    (void)p;
    const float *a = s->a;
    float *b = s->b;
    int64_t n = s->n;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) b[i] += a[i];
    return IDK_OK;
}

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* fn_dropout_fwd: mask[i] = keep ? 1/(1-ratio) : 0 from a counter-based hash of (seed, op,
 * i), so the mask depends only on the run's seed, never on threads; out = x * mask. */
static idk_status_t fn_dropout_fwd(idk_plan_t *p, tr_step_t *s) {
    uint64_t base = mix64(p->tr->seed ^ mix64((uint64_t)s->op + 1));
    const float *x = s->a;
    float *mask = s->b, *y = s->c;
    float ratio = s->f, keep = ratio < 1 ? 1.0f / (1.0f - ratio) : 0.0f;
    int64_t n = s->n;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(mix64(base + (uint64_t)i) >> 11) * (1.0 / 9007199254740992.0);
        float m = u >= ratio ? keep : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
    return IDK_OK;
}

/* fn_mul: c = a * b elementwise (dropout backward). */
static idk_status_t fn_mul(idk_plan_t *p, tr_step_t *s) {
    (void)p;
    int64_t n = s->n;
    const float *a = s->a, *b = s->b;
    float *c = s->c;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) c[i] = a[i] * b[i];
    return IDK_OK;
}

/* fn_concat copies plain input a (outer x n1 inner floats) into the output c at column
 * offset n2 of rows n3 wide; backward (f = 1) copies the other way, into a. */
static idk_status_t fn_concat(idk_plan_t *p, tr_step_t *s) {
    (void)p;
    int64_t outer = s->n, w = s->n1, off = s->n2, row = s->n3;
    for (int64_t o = 0; o < outer; o++) {
        if (s->f == 0) memcpy(s->c + o * row + off, s->a + o * w, (size_t)w * sizeof(float));
        else memcpy(s->a + o * w, s->c + o * row + off, (size_t)w * sizeof(float));
    }
    return IDK_OK;
}

/* fn_loss: mean cross-entropy's pieces from log-probabilities: the summed loss, the count of
 * correct top-1 answers, and d(loss*scale)/d(logp) = -scale at each label. */
static idk_status_t fn_loss(idk_plan_t *p, tr_step_t *s) {
    (void)s;
    idk_train_t *t = p->tr;
    int64_t N = t->N, K = t->K;
    double loss = 0;
    int64_t correct = 0;
    memset(t->dlogp, 0, (size_t)(N * K) * sizeof(float));
    for (int64_t i = 0; i < N; i++) {
        int64_t y = t->labels[i];
        if (y < 0 || y >= K)
            return idk_fail(p, IDK_ERR_RUNTIME, "label %lld at batch index %lld out of range for %lld classes",
                            (long long)y, (long long)i, (long long)K);
        const float *row = t->logp + i * K;
        loss -= row[y];
        int64_t best = 0;
        for (int64_t k = 1; k < K; k++)
            if (row[k] > row[best]) best = k;
        correct += best == y;
        t->dlogp[i * K + y] = -t->scale;
    }
    t->loss = loss;
    t->correct = correct;
    return IDK_OK;
}

static idk_status_t fn_bnstats(idk_plan_t *p, tr_step_t *s) {
    (void)s;
    idk_train_t *t = p->tr;
    for (int i = 0; i < t->nbn; i++) {
        tr_bn_t *b = &t->bn[i];
        float corr = b->count > 1 ? (float)b->count / (float)(b->count - 1) : 1.0f;
        for (int64_t c = 0; c < b->c; c++) {
            t->bstats[b->boff + c] = b->mean[c];
            t->bstats[b->boff + b->c + c] = b->var[c] * corr;
        }
    }
    return IDK_OK;
}

static tr_step_t *fn_step(idk_plan_t *p, tr_fn fn) {
    tr_step_t *s = tr_step(p);
    if (s) s->fn = fn;
    return s;
}

/* ---- values, views and gradients ---- */

static tr_tensor_t *TT(idk_plan_t *p, int tid) { return &p->tr->tt[tid]; }

static void plain_md(dnnl_memory_desc_t *md, const idk_tensor_t *t) { idk_plain_md(md, t->ndims, t->dims); }

/* val_in returns the value of tid in layout md (interpreting the primary buffer as
 * srcmd when srcmd is given), adding a reorder step at this point when needed. */
static float *val_in(idk_plan_t *p, int tid, const dnnl_memory_desc_t *srcmd, const dnnl_memory_desc_t *md) {
    tr_tensor_t *x = TT(p, tid);
    if (!x->defined) {
        idk_fail(p, IDK_ERR_INVALID, "train op %d reads tensor %d before it is written", p->cur_op, tid);
        return NULL;
    }
    const dnnl_memory_desc_t *src = srcmd ? srcmd : &x->md;
    if (dnnl_memory_desc_equal(src, md)) return x->val;
    for (int i = 0; i < x->nviews; i++)
        if (dnnl_memory_desc_equal(&x->views[i].md, md)) return x->views[i].ptr;
    float *b = tr_alloc(p, md_size(md));
    if (!b) return NULL;
    if (reorder_step(p, src, x->val, md, b) != IDK_OK) return NULL;
    if (x->nviews < TR_MAX_VIEWS) x->views[x->nviews++] = (tr_view_t){*md, b};
    return b;
}

static float *grad_buf(idk_plan_t *p, tr_tensor_t *x) {
    if (!x->grad) x->grad = tr_alloc(p, md_size(&x->md));
    return x->grad;
}

/* deliver adds the gradient contribution held at src (layout md, or the primary layout
 * viewed as md when aliasmd is given) to tid's gradient: the first contribution is copied or
 * reordered into place, later ones are added. */
static idk_status_t deliver(idk_plan_t *p, int tid, const dnnl_memory_desc_t *aliasmd, const dnnl_memory_desc_t *md,
                            float *src) {
    tr_tensor_t *x = TT(p, tid);
    if (!x->needs_grad) return IDK_OK;
    const dnnl_memory_desc_t *gmd = aliasmd ? aliasmd : &x->md;
    float *g = grad_buf(p, x);
    if (!g) return IDK_ERR_NOMEM;
    int same = dnnl_memory_desc_equal(gmd, md);
    size_t n = md_size(gmd) / sizeof(float);
    if (!x->grad_set) {
        x->grad_set = 1;
        if (same) {
            tr_step_t *s = fn_step(p, fn_copy);
            if (!s) return IDK_ERR_NOMEM;
            s->a = src;
            s->b = g;
            s->n = (int64_t)n;
            return IDK_OK;
        }
        return reorder_step(p, md, src, gmd, g);
    }
    float *from = src;
    if (!same) {
        if (!(from = tr_alloc(p, md_size(gmd)))) return IDK_ERR_NOMEM;
        idk_status_t st = reorder_step(p, md, src, gmd, from);
        if (st != IDK_OK) return st;
    }
    tr_step_t *s = fn_step(p, fn_acc);
    if (!s) return IDK_ERR_NOMEM;
    s->a = from;
    s->b = g;
    s->n = (int64_t)n;
    return IDK_OK;
}

/* grad_out returns where a backward primitive should write tid's gradient in layout md:
 * the gradient itself when this is its first contribution in its own layout (*direct = 1),
 * else a new buffer to pass to deliver afterwards. NULL with *direct = -1: no gradient
 * needed (a scratch buffer is returned instead when scratch is set). */
static float *grad_out(idk_plan_t *p, int tid, const dnnl_memory_desc_t *aliasmd, const dnnl_memory_desc_t *md,
                       int *direct, int scratch) {
    tr_tensor_t *x = TT(p, tid);
    *direct = 0;
    if (!x->needs_grad) {
        *direct = -1;
        return scratch ? tr_alloc(p, md_size(md)) : NULL;
    }
    const dnnl_memory_desc_t *gmd = aliasmd ? aliasmd : &x->md;
    if (!x->grad_set && dnnl_memory_desc_equal(gmd, md)) {
        x->grad_set = 1;
        *direct = 1;
        return grad_buf(p, x);
    }
    return tr_alloc(p, md_size(md));
}

static idk_status_t grad_done(idk_plan_t *p, int tid, const dnnl_memory_desc_t *aliasmd, const dnnl_memory_desc_t *md,
                              float *buf, int direct) {
    if (direct != 0) return IDK_OK;
    return deliver(p, tid, aliasmd, md, buf);
}

/* define sets an op output's layout and allocates its value. */
static float *define(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md) {
    tr_tensor_t *x = TT(p, tid);
    x->md = *md;
    x->val = tr_alloc(p, md_size(md));
    x->defined = x->val != NULL;
    return x->val;
}

/* out_grad returns an op output's gradient (in its layout), or NULL when nothing reads it
 * backwards (then the op's backward is skipped). */
static float *out_grad(idk_plan_t *p, int tid) {
    tr_tensor_t *x = TT(p, tid);
    if (!x->needs_grad || !x->grad_set) return NULL;
    return x->grad;
}

/* ---- per-op lowering: forward (bw = 0) and backward (bw = 1) ---- */

/* what the forward leaves for the backward of one op */
typedef struct {
    dnnl_primitive_desc_t fpd;
    dnnl_memory_desc_t smd, wmd, dmd, pwmd;
    float *src, *w, *ws, *mask, *shift;
    int grouped;
} tr_opstate_t;

static void spatial(const int64_t *ia, int S, int base, dnnl_dims_t out, int minus1) {
    for (int i = 0; i < S; i++) out[i] = ia[base + i] - minus1;
}

static int is_ref(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) return 1;
    return strncmp(impl, "ref", 3) == 0;
}

/* conv_bwd_fast reports whether both backward passes of forward pd fpd (descriptor cd) have
 * an implementation other than oneDNN's slow reference loops. */
static int conv_bwd_fast(idk_plan_t *p, const dnnl_convolution_desc_t *cd, const_dnnl_primitive_desc_t fpd,
                         const dnnl_memory_desc_t *bmd, const dnnl_dims_t st, const dnnl_dims_t dl, const dnnl_dims_t pb,
                         const dnnl_dims_t pe) {
    dnnl_memory_desc_t smd = *q(fpd, dnnl_query_src_md), dmd = *q(fpd, dnnl_query_dst_md), w = cd->weights_desc;
    dnnl_memory_desc_init_by_tag(&w, w.ndims, w.dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t bd, bw;
    dnnl_primitive_desc_t pd1 = NULL, pd2 = NULL;
    int ok = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &smd, &w, &dmd, st, dl, pb, pe) ==
                 dnnl_success &&
             dnnl_dilated_convolution_backward_weights_desc_init(&bw, dnnl_convolution_direct, &smd, &w, bmd, &dmd, st, dl,
                                                                 pb, pe) == dnnl_success &&
             tr_pd(p, &pd1, &bd, fpd) == dnnl_success && tr_pd(p, &pd2, &bw, fpd) == dnnl_success && !is_ref(pd1) &&
             !is_ref(pd2);
    if (pd1) dnnl_primitive_desc_destroy(pd1);
    if (pd2) dnnl_primitive_desc_destroy(pd2);
    return ok;
}

static idk_status_t conv_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    const idk_tensor_t *x = &p->t[op->in[0]], *w = &p->t[op->in[1]], *y = &p->t[op->out[0]];
    int nd = x->ndims, S = nd - 2;
    int64_t g = op->ia[1 + 4 * S];
    dnnl_dims_t st, dl, pb, pe;
    spatial(op->ia, S, 1, st, 0);
    spatial(op->ia, S, 1 + S, dl, 1);
    spatial(op->ia, S, 1 + 2 * S, pb, 0);
    spatial(op->ia, S, 1 + 3 * S, pe, 0);
    dnnl_dims_t xd, yd, wd, bd;
    for (int i = 0; i < nd; i++) xd[i] = x->dims[i], yd[i] = y->dims[i];
    int wn = nd;
    if (g > 1) {
        wd[0] = g;
        wd[1] = w->dims[0] / g;
        for (int i = 1; i < nd; i++) wd[i + 1] = w->dims[i];
        wn = nd + 1;
    } else {
        for (int i = 0; i < nd; i++) wd[i] = w->dims[i];
    }
    o->grouped = g > 1;
    dnnl_memory_desc_init_by_tag(&o->pwmd, wn, wd, dnnl_f32, g > 1 ? (nd == 4 ? dnnl_goihw : nd == 3 ? dnnl_goiw : dnnl_goidhw)
                                                                   : (nd == 4 ? dnnl_oihw : nd == 3 ? dnnl_oiw : dnnl_oidhw));
    int has_bias = op->nin == 3;
    bd[0] = y->dims[1];
    dnnl_memory_desc_t bmd, smd, dmd, wmd;
    dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
    /* 2-D: oneDNN's blocked nChw16c layout for activations (as inference plans do); the
     * first layer's few input channels stay plain. Other ranks: oneDNN's choice. */
    /* layouts, tried in order: blocked nChw16c activations (2-D; a first layer's few input
     * channels stay plain), plain nchw, then oneDNN's choice. A layout is taken only if both
     * backward passes have a fast (non-reference) implementation for it. */
    int mode = nd == 4 ? 0 : 2;
    dnnl_convolution_desc_t cd;
    dnnl_status_t ds;
    for (;; mode++) {
        if (mode == 0) {
            dnnl_memory_desc_init_by_tag(&smd, 4, xd, dnnl_f32, x->dims[1] < 8 ? dnnl_nchw : dnnl_nChw16c);
            dnnl_memory_desc_init_by_tag(&dmd, 4, yd, dnnl_f32, y->dims[1] < 8 ? dnnl_nchw : dnnl_nChw16c);
        } else if (mode == 1) {
            dnnl_memory_desc_init_by_tag(&smd, 4, xd, dnnl_f32, dnnl_nchw);
            dnnl_memory_desc_init_by_tag(&dmd, 4, yd, dnnl_f32, dnnl_nchw);
        } else {
            dnnl_memory_desc_init_by_tag(&smd, nd, xd, dnnl_f32, dnnl_format_tag_any);
            dnnl_memory_desc_init_by_tag(&dmd, nd, yd, dnnl_f32, dnnl_format_tag_any);
        }
        dnnl_memory_desc_init_by_tag(&wmd, wn, wd, dnnl_f32, dnnl_format_tag_any);
        ds = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &smd, &wmd,
                                                        has_bias ? &bmd : NULL, &dmd, st, dl, pb, pe);
        if (ds == dnnl_success) ds = tr_pd(p, &o->fpd, &cd, NULL);
        if (ds == dnnl_success && (mode == 2 || conv_bwd_fast(p, &cd, o->fpd, has_bias ? &bmd : NULL, st, dl, pb, pe)))
            break;
        if (ds == dnnl_success) {
            dnnl_primitive_desc_destroy(o->fpd);
            o->fpd = NULL;
        }
        if (mode == 2) break;
    }
    if (ds != dnnl_success) return dfail(p, "conv forward", ds);
    o->smd = *q(o->fpd, dnnl_query_src_md);
    o->wmd = *q(o->fpd, dnnl_query_weights_md);
    o->dmd = *q(o->fpd, dnnl_query_dst_md);
    if (!(o->src = val_in(p, op->in[0], NULL, &o->smd))) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    if (!(o->w = val_in(p, op->in[1], &o->pwmd, &o->wmd))) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    float *bias = has_bias ? val_in(p, op->in[2], &bmd, &bmd) : NULL;
    float *dst = define(p, op->out[0], &o->dmd);
    if (!dst || (has_bias && !bias)) return IDK_ERR_NOMEM;
    tr_step_t *s = tr_prim(p, o->fpd);
    if (!s) return IDK_ERR_DNNL;
    tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
    tr_arg(s, DNNL_ARG_WEIGHTS, &o->wmd, o->w);
    if (has_bias) tr_arg(s, DNNL_ARG_BIAS, &bmd, bias);
    tr_arg(s, DNNL_ARG_DST, &o->dmd, dst);
    return IDK_OK;
}

static idk_status_t conv_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy) return IDK_OK;
    const idk_tensor_t *x = &p->t[op->in[0]];
    int nd = x->ndims, S = nd - 2;
    dnnl_dims_t st, dl, pb, pe, bd;
    spatial(op->ia, S, 1, st, 0);
    spatial(op->ia, S, 1 + S, dl, 1);
    spatial(op->ia, S, 1 + 2 * S, pb, 0);
    spatial(op->ia, S, 1 + 3 * S, pe, 0);
    int has_bias = op->nin == 3;
    bd[0] = p->t[op->out[0]].dims[1];
    dnnl_memory_desc_t bmd;
    dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
    dnnl_status_t ds;
    /* weights (and bias) gradient */
    if (TT(p, op->in[1])->needs_grad || (has_bias && TT(p, op->in[2])->needs_grad)) {
        dnnl_memory_desc_t dwmd = o->wmd;
        dnnl_memory_desc_t anyw;
        dnnl_memory_desc_init_by_tag(&anyw, dwmd.ndims, dwmd.dims, dnnl_f32, dnnl_format_tag_any);
        dnnl_convolution_desc_t cd;
        ds = dnnl_dilated_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &o->smd, &anyw,
                                                                 has_bias ? &bmd : NULL, &o->dmd, st, dl, pb, pe);
        dnnl_primitive_desc_t pd = NULL;
        if (ds == dnnl_success) ds = tr_pd(p, &pd, &cd, o->fpd);
        if (ds != dnnl_success) return dfail(p, "conv backward weights", ds);
        dwmd = *q(pd, dnnl_query_diff_weights_md);
        dnnl_memory_desc_t smd = *q(pd, dnnl_query_src_md), ddmd = *q(pd, dnnl_query_diff_dst_md);
        float *src = val_in(p, op->in[0], NULL, &smd);
        float *ddy = dy;
        if (!dnnl_memory_desc_equal(&ddmd, &o->dmd)) {
            ddy = tr_alloc(p, md_size(&ddmd));
            if (!ddy || reorder_step(p, &o->dmd, dy, &ddmd, ddy) != IDK_OK) {
                dnnl_primitive_desc_destroy(pd);
                return IDK_ERR_DNNL;
            }
        }
        int dw_direct, db_direct = -1;
        float *dw = grad_out(p, op->in[1], &o->pwmd, &dwmd, &dw_direct, 1);
        float *dbias = has_bias ? grad_out(p, op->in[2], NULL, &bmd, &db_direct, 1) : NULL;
        tr_step_t *s = src && dw && (!has_bias || dbias) ? tr_prim(p, pd) : NULL;
        dnnl_primitive_desc_destroy(pd);
        if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
        tr_arg(s, DNNL_ARG_SRC, &smd, src);
        tr_arg(s, DNNL_ARG_DIFF_DST, &ddmd, ddy);
        tr_arg(s, DNNL_ARG_DIFF_WEIGHTS, &dwmd, dw);
        if (has_bias) tr_arg(s, DNNL_ARG_DIFF_BIAS, &bmd, dbias);
        idk_status_t st2 = grad_done(p, op->in[1], &o->pwmd, &dwmd, dw, dw_direct);
        if (st2 == IDK_OK && has_bias) st2 = grad_done(p, op->in[2], NULL, &bmd, dbias, db_direct);
        if (st2 != IDK_OK) return st2;
    }
    /* data gradient */
    if (TT(p, op->in[0])->needs_grad) {
        dnnl_memory_desc_t anyw;
        dnnl_memory_desc_init_by_tag(&anyw, o->wmd.ndims, o->wmd.dims, dnnl_f32, dnnl_format_tag_any);
        dnnl_convolution_desc_t cd;
        ds = dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &o->smd, &anyw, &o->dmd, st,
                                                              dl, pb, pe);
        dnnl_primitive_desc_t pd = NULL;
        if (ds == dnnl_success) ds = tr_pd(p, &pd, &cd, o->fpd);
        if (ds != dnnl_success) return dfail(p, "conv backward data", ds);
        dnnl_memory_desc_t wmd = *q(pd, dnnl_query_weights_md), dsmd = *q(pd, dnnl_query_diff_src_md),
                           ddmd = *q(pd, dnnl_query_diff_dst_md);
        float *w = val_in(p, op->in[1], &o->pwmd, &wmd);
        float *ddy = dy;
        if (w && !dnnl_memory_desc_equal(&ddmd, &o->dmd)) {
            ddy = tr_alloc(p, md_size(&ddmd));
            if (!ddy || reorder_step(p, &o->dmd, dy, &ddmd, ddy) != IDK_OK) w = NULL;
        }
        int dx_direct;
        float *dx = w ? grad_out(p, op->in[0], NULL, &dsmd, &dx_direct, 1) : NULL;
        tr_step_t *s = dx ? tr_prim(p, pd) : NULL;
        dnnl_primitive_desc_destroy(pd);
        if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
        tr_arg(s, DNNL_ARG_DIFF_DST, &ddmd, ddy);
        tr_arg(s, DNNL_ARG_WEIGHTS, &wmd, w);
        tr_arg(s, DNNL_ARG_DIFF_SRC, &dsmd, dx);
        return grad_done(p, op->in[0], NULL, &dsmd, dx, dx_direct);
    }
    return IDK_OK;
}

static idk_status_t pool_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    const idk_tensor_t *y = &p->t[op->out[0]];
    int S = (int)op->ia[1];
    dnnl_dims_t k, st, dl, pb, pe, yd;
    spatial(op->ia, S, 2, k, 0);
    spatial(op->ia, S, 2 + S, st, 0);
    spatial(op->ia, S, 2 + 2 * S, dl, 1);
    spatial(op->ia, S, 2 + 3 * S, pb, 0);
    spatial(op->ia, S, 2 + 4 * S, pe, 0);
    for (int i = 0; i < y->ndims; i++) yd[i] = y->dims[i];
    tr_tensor_t *x = TT(p, op->in[0]);
    o->smd = x->md;
    o->src = x->val;
    dnnl_memory_desc_t dmd;
    dnnl_memory_desc_init_by_tag(&dmd, y->ndims, yd, dnnl_f32, dnnl_format_tag_any);
    dnnl_alg_kind_t alg = op->ia[0] == IDK_POOL_MAX ? dnnl_pooling_max
                          : op->ia[0] == IDK_POOL_AVG_INCLUDE_PAD ? dnnl_pooling_avg_include_padding
                                                                  : dnnl_pooling_avg_exclude_padding;
    dnnl_pooling_v2_desc_t d;
    dnnl_status_t ds = dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_training, alg, &o->smd, &dmd, st, k, dl, pb, pe);
    if (ds == dnnl_success) ds = tr_pd(p, &o->fpd, &d, NULL);
    if (ds != dnnl_success) return dfail(p, "pool forward", ds);
    o->dmd = *q(o->fpd, dnnl_query_dst_md);
    const dnnl_memory_desc_t *wsmd = q(o->fpd, dnnl_query_workspace_md);
    float *dst = define(p, op->out[0], &o->dmd);
    if (!dst) return IDK_ERR_NOMEM;
    o->ws = NULL;
    if (wsmd && md_size(wsmd) > 0 && !(o->ws = tr_alloc(p, md_size(wsmd)))) return IDK_ERR_NOMEM;
    tr_step_t *s = tr_prim(p, o->fpd);
    if (!s) return IDK_ERR_DNNL;
    tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
    tr_arg(s, DNNL_ARG_DST, &o->dmd, dst);
    if (o->ws) tr_arg(s, DNNL_ARG_WORKSPACE, wsmd, o->ws);
    return IDK_OK;
}

static idk_status_t pool_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy || !TT(p, op->in[0])->needs_grad) return IDK_OK;
    int S = (int)op->ia[1];
    dnnl_dims_t k, st, dl, pb, pe;
    spatial(op->ia, S, 2, k, 0);
    spatial(op->ia, S, 2 + S, st, 0);
    spatial(op->ia, S, 2 + 2 * S, dl, 1);
    spatial(op->ia, S, 2 + 3 * S, pb, 0);
    spatial(op->ia, S, 2 + 4 * S, pe, 0);
    dnnl_alg_kind_t alg = op->ia[0] == IDK_POOL_MAX ? dnnl_pooling_max
                          : op->ia[0] == IDK_POOL_AVG_INCLUDE_PAD ? dnnl_pooling_avg_include_padding
                                                                  : dnnl_pooling_avg_exclude_padding;
    dnnl_pooling_v2_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t ds = dnnl_pooling_v2_backward_desc_init(&d, alg, &o->smd, &o->dmd, st, k, dl, pb, pe);
    if (ds == dnnl_success) ds = tr_pd(p, &pd, &d, o->fpd);
    if (ds != dnnl_success) return dfail(p, "pool backward", ds);
    int direct;
    float *dx = grad_out(p, op->in[0], NULL, &o->smd, &direct, 1);
    tr_step_t *s = dx ? tr_prim(p, pd) : NULL;
    const dnnl_memory_desc_t *wsmd = q(pd, dnnl_query_workspace_md);
    if (s) {
        tr_arg(s, DNNL_ARG_DIFF_DST, &o->dmd, dy);
        tr_arg(s, DNNL_ARG_DIFF_SRC, &o->smd, dx);
        if (o->ws && wsmd) tr_arg(s, DNNL_ARG_WORKSPACE, wsmd, o->ws);
    }
    dnnl_primitive_desc_destroy(pd);
    if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    return grad_done(p, op->in[0], NULL, &o->smd, dx, direct);
}

static idk_status_t elt_alg(idk_plan_t *p, const idk_op_t *op, dnnl_alg_kind_t *k, float *a, float *b) {
    *a = 0;
    *b = 0;
    switch (op->ia[0]) {
    case IDK_ELT_RELU: *k = dnnl_eltwise_relu; *a = op->fa[0]; return IDK_OK;
    case IDK_ELT_CLIP: *k = dnnl_eltwise_clip; *a = op->fa[0]; *b = op->fa[1]; return IDK_OK;
    case IDK_ELT_SIGMOID: *k = dnnl_eltwise_logistic; return IDK_OK;
    case IDK_ELT_TANH: *k = dnnl_eltwise_tanh; return IDK_OK;
    case IDK_ELT_ELU: *k = dnnl_eltwise_elu; *a = op->fa[0]; return IDK_OK;
    case IDK_ELT_HARD_SWISH: *k = dnnl_eltwise_hardswish; return IDK_OK;
    }
    return idk_fail(p, IDK_ERR_UNSUPPORTED, "train op %d: activation %lld is not trainable", p->cur_op, (long long)op->ia[0]);
}

static idk_status_t eltwise_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    dnnl_alg_kind_t k = dnnl_eltwise_relu;
    float a, b;
    idk_status_t st = elt_alg(p, op, &k, &a, &b);
    if (st != IDK_OK) return st;
    tr_tensor_t *x = TT(p, op->in[0]);
    o->smd = x->md;
    o->src = x->val;
    dnnl_eltwise_desc_t d;
    dnnl_status_t ds = dnnl_eltwise_forward_desc_init(&d, dnnl_forward_training, k, &o->smd, a, b);
    if (ds == dnnl_success) ds = tr_pd(p, &o->fpd, &d, NULL);
    if (ds != dnnl_success) return dfail(p, "eltwise forward", ds);
    float *dst = define(p, op->out[0], &o->smd);
    tr_step_t *s = dst ? tr_prim(p, o->fpd) : NULL;
    if (!s) return IDK_ERR_NOMEM;
    tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
    tr_arg(s, DNNL_ARG_DST, &o->smd, dst);
    return IDK_OK;
}

static idk_status_t eltwise_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy || !TT(p, op->in[0])->needs_grad) return IDK_OK;
    dnnl_alg_kind_t k = dnnl_eltwise_relu;
    float a, b;
    idk_status_t st = elt_alg(p, op, &k, &a, &b);
    if (st != IDK_OK) return st;
    dnnl_eltwise_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t ds = dnnl_eltwise_backward_desc_init(&d, k, &o->smd, &o->smd, a, b);
    if (ds == dnnl_success) ds = tr_pd(p, &pd, &d, o->fpd);
    if (ds != dnnl_success) return dfail(p, "eltwise backward", ds);
    int direct;
    float *dx = grad_out(p, op->in[0], NULL, &o->smd, &direct, 1);
    tr_step_t *s = dx ? tr_prim(p, pd) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
    tr_arg(s, DNNL_ARG_DIFF_DST, &o->smd, dy);
    tr_arg(s, DNNL_ARG_DIFF_SRC, &o->smd, dx);
    return grad_done(p, op->in[0], NULL, &o->smd, dx, direct);
}

static int same_dims_t(const idk_tensor_t *a, const idk_tensor_t *b) {
    if (a->ndims != b->ndims) return 0;
    for (int i = 0; i < a->ndims; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

static idk_status_t add_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    if (op->ia[0] != IDK_BIN_ADD || !same_dims_t(&p->t[op->in[0]], &p->t[op->in[1]]))
        return idk_fail(p, IDK_ERR_UNSUPPORTED, "train op %d: only Add of two same-shaped tensors is trainable", p->cur_op);
    tr_tensor_t *a = TT(p, op->in[0]);
    o->smd = a->md;
    float *b = val_in(p, op->in[1], NULL, &o->smd);
    if (!b) return IDK_ERR_DNNL;
    dnnl_binary_desc_t d;
    dnnl_status_t ds = dnnl_binary_desc_init(&d, dnnl_binary_add, &o->smd, &o->smd, &o->smd);
    if (ds == dnnl_success) ds = tr_pd(p, &o->fpd, &d, NULL);
    if (ds != dnnl_success) return dfail(p, "add", ds);
    float *dst = define(p, op->out[0], &o->smd);
    tr_step_t *s = dst ? tr_prim(p, o->fpd) : NULL;
    if (!s) return IDK_ERR_NOMEM;
    tr_arg(s, DNNL_ARG_SRC_0, &o->smd, a->val);
    tr_arg(s, DNNL_ARG_SRC_1, &o->smd, b);
    tr_arg(s, DNNL_ARG_DST, &o->smd, dst);
    return IDK_OK;
}

static idk_status_t add_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy) return IDK_OK;
    for (int i = 0; i < 2; i++) {
        idk_status_t st = deliver(p, op->in[i], NULL, &o->smd, dy);
        if (st != IDK_OK) return st;
    }
    return IDK_OK;
}

static idk_status_t bnorm_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    idk_train_t *t = p->tr;
    const idk_tensor_t *x = &p->t[op->in[0]];
    tr_tensor_t *xt = TT(p, op->in[0]);
    o->smd = xt->md;
    o->src = xt->val;
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_batch_normalization_desc_t d;
    dnnl_status_t ds = dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_training, &o->smd, op->fa[0], flags);
    if (ds == dnnl_success) ds = tr_pd(p, &o->fpd, &d, NULL);
    if (ds != dnnl_success) return dfail(p, "batch norm forward", ds);
    int64_t C = x->dims[1], count = 1;
    for (int i = 0; i < x->ndims; i++)
        if (i != 1) count *= x->dims[i];
    dnnl_memory_desc_t cmd;
    dnnl_dims_t cd = {C};
    dnnl_memory_desc_init_by_tag(&cmd, 1, cd, dnnl_f32, dnnl_a);
    float *scale = val_in(p, op->in[1], &cmd, &cmd), *shift = val_in(p, op->in[2], &cmd, &cmd);
    float *mean = tr_alloc(p, (size_t)C * 4), *var = tr_alloc(p, (size_t)C * 4);
    float *dst = define(p, op->out[0], &o->smd);
    tr_step_t *s = scale && shift && mean && var && dst ? tr_prim(p, o->fpd) : NULL;
    if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
    tr_arg(s, DNNL_ARG_DST, &o->smd, dst);
    tr_arg(s, DNNL_ARG_SCALE, &cmd, scale);
    tr_arg(s, DNNL_ARG_SHIFT, &cmd, shift);
    tr_arg(s, DNNL_ARG_MEAN, &cmd, mean);
    tr_arg(s, DNNL_ARG_VARIANCE, &cmd, var);
    tr_bn_t *nb = realloc(t->bn, (size_t)(t->nbn + 1) * sizeof *nb);
    if (!nb) return IDK_ERR_NOMEM;
    t->bn = nb;
    tr_tensor_t *rm = TT(p, op->in[3]), *rv = TT(p, op->in[4]);
    t->bn[t->nbn++] = (tr_bn_t){C, count, op->nf > 1 ? op->fa[1] : 0.9f, mean, var,
                                rm->role == IDK_TRAIN_STATE ? rm->val : NULL, rv->role == IDK_TRAIN_STATE ? rv->val : NULL,
                                t->nbstats};
    t->nbstats += 2 * C;
    o->w = scale;
    o->shift = shift;
    o->ws = mean;
    o->mask = var;
    return IDK_OK;
}

static idk_status_t bnorm_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy) return IDK_OK;
    if (!TT(p, op->in[0])->needs_grad && !TT(p, op->in[1])->needs_grad && !TT(p, op->in[2])->needs_grad) return IDK_OK;
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_batch_normalization_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t ds = dnnl_batch_normalization_backward_desc_init(&d, dnnl_backward, &o->smd, &o->smd, op->fa[0], flags);
    if (ds == dnnl_success) ds = tr_pd(p, &pd, &d, o->fpd);
    if (ds != dnnl_success) return dfail(p, "batch norm backward", ds);
    int64_t C = p->t[op->in[0]].dims[1];
    dnnl_memory_desc_t cmd;
    dnnl_dims_t cd = {C};
    dnnl_memory_desc_init_by_tag(&cmd, 1, cd, dnnl_f32, dnnl_a);
    int dx_d, ds_d, db_d;
    float *dx = grad_out(p, op->in[0], NULL, &o->smd, &dx_d, 1);
    float *dsc = grad_out(p, op->in[1], &cmd, &cmd, &ds_d, 1);
    float *dsh = grad_out(p, op->in[2], &cmd, &cmd, &db_d, 1);
    tr_step_t *s = dx && dsc && dsh ? tr_prim(p, pd) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
    tr_arg(s, DNNL_ARG_MEAN, &cmd, o->ws);
    tr_arg(s, DNNL_ARG_VARIANCE, &cmd, o->mask);
    tr_arg(s, DNNL_ARG_DIFF_DST, &o->smd, dy);
    tr_arg(s, DNNL_ARG_SCALE, &cmd, o->w);
    tr_arg(s, DNNL_ARG_SHIFT, &cmd, o->shift); /* counted among the inputs by oneDNN 2.6 */
    tr_arg(s, DNNL_ARG_DIFF_SRC, &o->smd, dx);
    tr_arg(s, DNNL_ARG_DIFF_SCALE, &cmd, dsc);
    tr_arg(s, DNNL_ARG_DIFF_SHIFT, &cmd, dsh);
    idk_status_t st = grad_done(p, op->in[0], NULL, &o->smd, dx, dx_d);
    if (st == IDK_OK) st = grad_done(p, op->in[1], &cmd, &cmd, dsc, ds_d);
    if (st == IDK_OK) st = grad_done(p, op->in[2], &cmd, &cmd, dsh, db_d);
    return st;
}

/* matmul: 2-D x (M, K) times a weight (K, N), or its transpose (N, K), plus a bias (1, N):
 * oneDNN's inner product with the weights read in place ("io" or "oi"). */
static idk_status_t matmul_mds(idk_plan_t *p, const idk_op_t *op, dnnl_memory_desc_t *smd, dnnl_memory_desc_t *wmd,
                               dnnl_memory_desc_t *bmd, dnnl_memory_desc_t *dmd) {
    const idk_tensor_t *a = &p->t[op->in[0]], *y = &p->t[op->out[0]];
    if (a->ndims != 2 || op->ia[0] != 0 || op->fa[0] != 1.0f)
        return idk_fail(p, IDK_ERR_UNSUPPORTED, "train op %d: only 2-D Gemm/MatMul without transA or alpha is trainable",
                        p->cur_op);
    dnnl_dims_t ad = {a->dims[0], a->dims[1]}, wd = {y->dims[1], a->dims[1]}, bd = {y->dims[1]}, yd = {y->dims[0], y->dims[1]};
    dnnl_memory_desc_init_by_tag(smd, 2, ad, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(wmd, 2, wd, dnnl_f32, op->ia[1] ? dnnl_ab : dnnl_ba);
    dnnl_memory_desc_init_by_tag(bmd, 1, bd, dnnl_f32, dnnl_a);
    dnnl_memory_desc_init_by_tag(dmd, 2, yd, dnnl_f32, dnnl_ab);
    return IDK_OK;
}

static idk_status_t matmul_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    dnnl_memory_desc_t bmd;
    idk_status_t st = matmul_mds(p, op, &o->smd, &o->pwmd, &bmd, &o->dmd);
    if (st != IDK_OK) return st;
    int has_bias = op->nin == 3;
    dnnl_inner_product_desc_t d;
    o->wmd = o->pwmd;
    dnnl_status_t ds = dnnl_inner_product_forward_desc_init(&d, dnnl_forward_training, &o->smd, &o->wmd,
                                                            has_bias ? &bmd : NULL, &o->dmd);
    if (ds == dnnl_success) ds = tr_pd(p, &o->fpd, &d, NULL);
    if (ds != dnnl_success) {
        dnnl_memory_desc_init_by_tag(&o->wmd, 2, o->pwmd.dims, dnnl_f32, dnnl_format_tag_any);
        ds = dnnl_inner_product_forward_desc_init(&d, dnnl_forward_training, &o->smd, &o->wmd, has_bias ? &bmd : NULL, &o->dmd);
        if (ds == dnnl_success) ds = tr_pd(p, &o->fpd, &d, NULL);
        if (ds != dnnl_success) return dfail(p, "inner product forward", ds);
        o->wmd = *q(o->fpd, dnnl_query_weights_md);
    }
    o->src = val_in(p, op->in[0], NULL, &o->smd);
    o->w = val_in(p, op->in[1], &o->pwmd, &o->wmd);
    float *bias = has_bias ? val_in(p, op->in[2], &bmd, &bmd) : NULL;
    float *dst = define(p, op->out[0], &o->dmd);
    tr_step_t *s = o->src && o->w && dst && (!has_bias || bias) ? tr_prim(p, o->fpd) : NULL;
    if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
    tr_arg(s, DNNL_ARG_WEIGHTS, &o->wmd, o->w);
    if (has_bias) tr_arg(s, DNNL_ARG_BIAS, &bmd, bias);
    tr_arg(s, DNNL_ARG_DST, &o->dmd, dst);
    return IDK_OK;
}

static idk_status_t matmul_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy) return IDK_OK;
    dnnl_memory_desc_t smd, pw, bmd, dmd;
    matmul_mds(p, op, &smd, &pw, &bmd, &dmd);
    int has_bias = op->nin == 3;
    dnnl_inner_product_desc_t d;
    dnnl_status_t ds;
    if (TT(p, op->in[1])->needs_grad || (has_bias && TT(p, op->in[2])->needs_grad)) {
        dnnl_primitive_desc_t pd = NULL;
        ds = dnnl_inner_product_backward_weights_desc_init(&d, &o->smd, &o->wmd, has_bias ? &bmd : NULL, &o->dmd);
        if (ds == dnnl_success) ds = tr_pd(p, &pd, &d, o->fpd);
        if (ds != dnnl_success) return dfail(p, "inner product backward weights", ds);
        int dw_d, db_d = -1;
        float *dw = grad_out(p, op->in[1], &o->pwmd, &o->wmd, &dw_d, 1);
        float *db = has_bias ? grad_out(p, op->in[2], &bmd, &bmd, &db_d, 1) : NULL;
        tr_step_t *s = dw && (!has_bias || db) ? tr_prim(p, pd) : NULL;
        dnnl_primitive_desc_destroy(pd);
        if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
        tr_arg(s, DNNL_ARG_SRC, &o->smd, o->src);
        tr_arg(s, DNNL_ARG_DIFF_DST, &o->dmd, dy);
        tr_arg(s, DNNL_ARG_DIFF_WEIGHTS, &o->wmd, dw);
        if (has_bias) tr_arg(s, DNNL_ARG_DIFF_BIAS, &bmd, db);
        idk_status_t st = grad_done(p, op->in[1], &o->pwmd, &o->wmd, dw, dw_d);
        if (st == IDK_OK && has_bias) st = grad_done(p, op->in[2], &bmd, &bmd, db, db_d);
        if (st != IDK_OK) return st;
    }
    if (TT(p, op->in[0])->needs_grad) {
        dnnl_primitive_desc_t pd = NULL;
        ds = dnnl_inner_product_backward_data_desc_init(&d, &o->smd, &o->wmd, &o->dmd);
        if (ds == dnnl_success) ds = tr_pd(p, &pd, &d, o->fpd);
        if (ds != dnnl_success) return dfail(p, "inner product backward data", ds);
        int dx_d;
        float *dx = grad_out(p, op->in[0], NULL, &o->smd, &dx_d, 1);
        tr_step_t *s = dx ? tr_prim(p, pd) : NULL;
        dnnl_primitive_desc_destroy(pd);
        if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
        tr_arg(s, DNNL_ARG_DIFF_DST, &o->dmd, dy);
        tr_arg(s, DNNL_ARG_WEIGHTS, &o->wmd, o->w);
        tr_arg(s, DNNL_ARG_DIFF_SRC, &o->smd, dx);
        return grad_done(p, op->in[0], NULL, &o->smd, dx, dx_d);
    }
    return IDK_OK;
}

/* reshape and copy: the output is the input's plain value under new dims (no copy). */
static idk_status_t reshape_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    plain_md(&o->smd, &p->t[op->in[0]]);
    float *x = val_in(p, op->in[0], NULL, &o->smd);
    if (!x) return IDK_ERR_DNNL;
    tr_tensor_t *y = TT(p, op->out[0]);
    plain_md(&y->md, &p->t[op->out[0]]);
    y->val = x;
    y->defined = 1;
    return IDK_OK;
}

static idk_status_t reshape_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy) return IDK_OK;
    return deliver(p, op->in[0], NULL, &o->smd, dy);
}

static idk_status_t concat_geometry(idk_plan_t *p, const idk_op_t *op, int i, int64_t *outer, int64_t *w, int64_t *off,
                                    int64_t *row) {
    const idk_tensor_t *y = &p->t[op->out[0]];
    int64_t ax = op->ia[0], inner = 1;
    *outer = 1;
    for (int d = 0; d < ax; d++) *outer *= y->dims[d];
    for (int d = (int)ax + 1; d < y->ndims; d++) inner *= y->dims[d];
    *row = y->dims[ax] * inner;
    *off = 0;
    for (int k = 0; k < i; k++) *off += p->t[op->in[k]].dims[ax] * inner;
    *w = p->t[op->in[i]].dims[ax] * inner;
    return IDK_OK;
}

static idk_status_t concat_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    (void)o;
    if (p->t[op->out[0]].dtype != IDK_F32) return idk_fail(p, IDK_ERR_UNSUPPORTED, "train op %d: non-float concat", p->cur_op);
    dnnl_memory_desc_t ymd;
    plain_md(&ymd, &p->t[op->out[0]]);
    float *y = define(p, op->out[0], &ymd);
    if (!y) return IDK_ERR_NOMEM;
    for (int i = 0; i < op->nin; i++) {
        dnnl_memory_desc_t xmd;
        plain_md(&xmd, &p->t[op->in[i]]);
        float *x = val_in(p, op->in[i], NULL, &xmd);
        tr_step_t *s = x ? fn_step(p, fn_concat) : NULL;
        if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
        s->a = x;
        s->c = y;
        concat_geometry(p, op, i, &s->n, &s->n1, &s->n2, &s->n3);
    }
    return IDK_OK;
}

static idk_status_t concat_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    (void)o;
    float *dy = out_grad(p, op->out[0]);
    if (!dy) return IDK_OK;
    for (int i = 0; i < op->nin; i++) {
        if (!TT(p, op->in[i])->needs_grad) continue;
        dnnl_memory_desc_t xmd;
        plain_md(&xmd, &p->t[op->in[i]]);
        int d;
        float *dx = grad_out(p, op->in[i], NULL, &xmd, &d, 0);
        tr_step_t *s = dx ? fn_step(p, fn_concat) : NULL;
        if (!s) return IDK_ERR_NOMEM;
        s->a = dx;
        s->c = dy;
        s->f = 1;
        concat_geometry(p, op, i, &s->n, &s->n1, &s->n2, &s->n3);
        idk_status_t st = grad_done(p, op->in[i], NULL, &xmd, dx, d);
        if (st != IDK_OK) return st;
    }
    return IDK_OK;
}

static idk_status_t dropout_fw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    plain_md(&o->smd, &p->t[op->in[0]]);
    float *x = val_in(p, op->in[0], NULL, &o->smd);
    float *y = x ? define(p, op->out[0], &o->smd) : NULL;
    o->mask = tr_alloc(p, md_size(&o->smd));
    tr_step_t *s = y && o->mask ? fn_step(p, fn_dropout_fwd) : NULL;
    if (!s) return p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
    s->a = x;
    s->b = o->mask;
    s->c = y;
    s->f = op->fa[0];
    s->n = (int64_t)idk_tensor_volume(&p->t[op->in[0]]);
    return IDK_OK;
}

static idk_status_t dropout_bw(idk_plan_t *p, const idk_op_t *op, tr_opstate_t *o) {
    float *dy = out_grad(p, op->out[0]);
    if (!dy || !TT(p, op->in[0])->needs_grad) return IDK_OK;
    int d;
    float *dx = grad_out(p, op->in[0], NULL, &o->smd, &d, 0);
    tr_step_t *s = dx ? fn_step(p, fn_mul) : NULL;
    if (!s) return IDK_ERR_NOMEM;
    s->a = dy;
    s->b = o->mask;
    s->c = dx;
    s->n = (int64_t)idk_tensor_volume(&p->t[op->in[0]]);
    return grad_done(p, op->in[0], NULL, &o->smd, dx, d);
}

static idk_status_t lower(idk_plan_t *p, int opi, tr_opstate_t *o, int bw) {
    const idk_op_t *op = &p->ops[opi];
    p->cur_op = opi;
    if (op->npost) return idk_fail(p, IDK_ERR_UNSUPPORTED, "train op %d: fused post-ops are not trainable", opi);
    switch (op->kind) {
    case IDK_OP_CONV: return bw ? conv_bw(p, op, o) : conv_fw(p, op, o);
    case IDK_OP_POOL: return bw ? pool_bw(p, op, o) : pool_fw(p, op, o);
    case IDK_OP_ELTWISE: return bw ? eltwise_bw(p, op, o) : eltwise_fw(p, op, o);
    case IDK_OP_BINARY: return bw ? add_bw(p, op, o) : add_fw(p, op, o);
    case IDK_OP_BNORM: return bw ? bnorm_bw(p, op, o) : bnorm_fw(p, op, o);
    case IDK_OP_MATMUL: return bw ? matmul_bw(p, op, o) : matmul_fw(p, op, o);
    case IDK_OP_RESHAPE:
    case IDK_OP_COPY: return bw ? reshape_bw(p, op, o) : reshape_fw(p, op, o);
    case IDK_OP_CONCAT: return bw ? concat_bw(p, op, o) : concat_fw(p, op, o);
    case IDK_OP_DROPOUT: return bw ? dropout_bw(p, op, o) : dropout_fw(p, op, o);
    }
    return idk_fail(p, IDK_ERR_UNSUPPORTED, "train op %d: op kind %d is not trainable", opi, op->kind);
}

/* ---- public API ---- */

void idk_train_free(idk_train_t *t) {
    if (!t) return;
    for (int i = 0; i < t->ns; i++) {
        tr_step_t *s = &t->s[i];
        if (s->prim) dnnl_primitive_destroy(s->prim);
        for (int a = 0; a < s->nargs; a++)
            if (s->mem[a]) dnnl_memory_destroy(s->mem[a]);
    }
    for (int i = 0; i < t->nown; i++) free(t->own[i]);
    free(t->own);
    free(t->s);
    free(t->tt);
    free(t->bn);
    free(t);
}

/* grow_tt gives every tensor declared so far its training record. */
static idk_status_t grow_tt(idk_plan_t *p) {
    idk_train_t *t = p->tr;
    if (t->ntt >= p->nt && t->tt) return IDK_OK;
    tr_tensor_t *n = realloc(t->tt, (size_t)(p->nt + 1) * sizeof *n);
    if (!n) return IDK_ERR_NOMEM;
    memset(n + t->ntt, 0, (size_t)(p->nt + 1 - t->ntt) * sizeof *n);
    t->tt = n;
    t->ntt = p->nt;
    return IDK_OK;
}

static idk_train_t *tr_of(idk_plan_t *p) {
    if (!p->tr) {
        p->tr = calloc(1, sizeof *p->tr);
        if (p->tr) p->tr->input = p->tr->logits = -1;
    }
    return p->tr;
}

IDK_API idk_status_t idk_train_set_role(idk_plan_t *p, int32_t tid, int32_t role) {
    if (!p) return IDK_ERR_INVALID;
    if (p->compiled) return idk_fail(p, IDK_ERR_STATE, "set_role after compile");
    if (tid < 0 || tid >= p->nt) return idk_fail(p, IDK_ERR_INVALID, "tensor %d unknown", tid);
    if (role != IDK_TRAIN_PARAM && role != IDK_TRAIN_STATE) return idk_fail(p, IDK_ERR_INVALID, "role %d unknown", role);
    idk_tensor_t *x = &p->t[tid];
    if (!x->cdata || x->dtype != IDK_F32)
        return idk_fail(p, IDK_ERR_INVALID, "tensor %d: a parameter must be a float constant (its initial value)", tid);
    idk_train_t *t = tr_of(p);
    if (!t || grow_tt(p) != IDK_OK) return IDK_ERR_NOMEM;
    tr_tensor_t *tt = &t->tt[tid];
    if (tt->role) return idk_fail(p, IDK_ERR_INVALID, "tensor %d given a role twice", tid);
    tt->role = role;
    int64_t n = (int64_t)idk_tensor_volume(x);
    if (role == IDK_TRAIN_PARAM) {
        tt->off = t->nparams;
        t->nparams += n;
    } else {
        tt->off = t->nstate;
        t->nstate += n;
    }
    return IDK_OK;
}

static idk_status_t finish_memories(idk_plan_t *p) {
    idk_train_t *t = p->tr;
    size_t scratch = 0;
    for (int i = 0; i < t->ns; i++)
        for (int a = 0; a < t->s[i].nargs; a++)
            if (!t->s[i].aptr[a] && md_size(&t->s[i].amd[a]) > scratch) scratch = md_size(&t->s[i].amd[a]);
    t->scratch_size = scratch;
    if (!(t->scratch = tr_alloc(p, scratch))) return IDK_ERR_NOMEM;
    for (int i = 0; i < t->ns; i++) {
        tr_step_t *s = &t->s[i];
        for (int a = 0; a < s->nargs; a++) {
            void *ptr = s->aptr[a] ? s->aptr[a] : t->scratch;
            if (dnnl_memory_create(&s->mem[a], &s->amd[a], p->eng, ptr) != dnnl_success)
                return idk_fail(p, IDK_ERR_DNNL, "memory object for train step %d failed", i);
            s->ea[a] = (dnnl_exec_arg_t){s->akind[a], s->mem[a]};
        }
    }
    return IDK_OK;
}

IDK_API idk_status_t idk_train_compile(idk_plan_t *p, int32_t input, int32_t logits) {
    if (!p) return IDK_ERR_INVALID;
    if (p->compiled) return idk_fail(p, IDK_ERR_STATE, "compile twice");
    if (input < 0 || input >= p->nt || p->t[input].cdata || p->t[input].dtype != IDK_F32)
        return idk_fail(p, IDK_ERR_INVALID, "input tensor %d unknown or constant", input);
    if (logits < 0 || logits >= p->nt || p->t[logits].ndims != 2 || p->t[logits].dtype != IDK_F32)
        return idk_fail(p, IDK_ERR_INVALID, "logits tensor %d must be a (batch, classes) float tensor", logits);
    if (p->t[logits].dims[0] != p->t[input].dims[0] || p->t[logits].dims[1] < 1)
        return idk_fail(p, IDK_ERR_INVALID, "logits dims (%lld, %lld) do not match the batch %lld",
                        (long long)p->t[logits].dims[0], (long long)p->t[logits].dims[1], (long long)p->t[input].dims[0]);
    idk_train_t *t = tr_of(p);
    if (!t || grow_tt(p) != IDK_OK) return IDK_ERR_NOMEM;
    p->compiled = 1; /* no more adds, whatever happens below */
    if (p->threads > 0) omp_set_num_threads(p->threads);
    t->input = input;
    t->logits = logits;
    t->N = p->t[logits].dims[0];
    t->K = p->t[logits].dims[1];
    size_t np = (size_t)(t->nparams ? t->nparams : 1) * 4, nsb = (size_t)(t->nstate ? t->nstate : 1) * 4;
    if (!(t->params = tr_alloc(p, np)) || !(t->grads = tr_alloc(p, np)) || !(t->opt1 = tr_alloc(p, np)) ||
        !(t->opt2 = tr_alloc(p, np)) || !(t->state = tr_alloc(p, nsb)))
        return IDK_ERR_NOMEM;
    for (int i = 0; i < p->nt; i++) {
        idk_tensor_t *x = &p->t[i];
        tr_tensor_t *tt = &t->tt[i];
        if (tt->role == IDK_TRAIN_PARAM || tt->role == IDK_TRAIN_STATE) {
            float *base = tt->role == IDK_TRAIN_PARAM ? t->params : t->state;
            tt->val = base + tt->off;
            memcpy(tt->val, x->cdata, x->nbytes);
            plain_md(&tt->md, x);
            tt->defined = 1;
            if (tt->role == IDK_TRAIN_PARAM) {
                tt->grad = t->grads + tt->off;
                tt->needs_grad = 1;
            }
        } else if (x->cdata) {
            tt->role = TR_CONST;
            if (x->dtype == IDK_F32) {
                tt->val = x->cdata;
                plain_md(&tt->md, x);
                tt->defined = 1;
            }
        }
    }
    tr_tensor_t *in = &t->tt[input];
    in->role = TR_INPUT;
    plain_md(&in->md, &p->t[input]);
    if (!(in->val = tr_alloc(p, p->t[input].nbytes))) return IDK_ERR_NOMEM;
    in->defined = 1;
    for (int o = 0; o < p->nops; o++) {
        idk_op_t *op = &p->ops[o];
        int ng = 0;
        for (int i = 0; i < op->nin; i++) ng |= t->tt[op->in[i]].needs_grad && t->tt[op->in[i]].role != IDK_TRAIN_STATE;
        for (int i = 0; i < op->nout; i++) t->tt[op->out[i]].needs_grad = ng;
    }
    tr_opstate_t *os = calloc((size_t)p->nops + 1, sizeof *os);
    if (!os) return IDK_ERR_NOMEM;
    idk_status_t st = IDK_OK;
    for (int o = 0; o < p->nops && st == IDK_OK; o++) st = lower(p, o, &os[o], 0);
    /* loss forward: logsoftmax over the classes, then the C loss step */
    dnnl_memory_desc_t lmd;
    dnnl_primitive_desc_t lpd = NULL;
    p->cur_op = p->nops;
    if (st == IDK_OK) {
        plain_md(&lmd, &p->t[logits]);
        float *lg = t->tt[logits].defined ? val_in(p, logits, NULL, &lmd) : NULL;
        t->logp = tr_alloc(p, md_size(&lmd));
        t->dlogp = tr_alloc(p, md_size(&lmd));
        dnnl_logsoftmax_desc_t d;
        dnnl_status_t ds = dnnl_logsoftmax_forward_desc_init(&d, dnnl_forward_training, &lmd, 1);
        if (ds == dnnl_success) ds = tr_pd(p, &lpd, &d, NULL);
        tr_step_t *s = NULL;
        if (ds != dnnl_success) st = dfail(p, "logsoftmax forward", ds);
        else if (!lg || !t->logp || !t->dlogp || !(s = tr_prim(p, lpd))) st = p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
        if (s) {
            tr_arg(s, DNNL_ARG_SRC, &lmd, lg);
            tr_arg(s, DNNL_ARG_DST, &lmd, t->logp);
            if (!fn_step(p, fn_loss)) st = IDK_ERR_NOMEM;
        }
    }
    if (st == IDK_OK && t->nbn) {
        if (!(t->bstats = tr_alloc(p, (size_t)t->nbstats * 4)) || !fn_step(p, fn_bnstats)) st = IDK_ERR_NOMEM;
    }
    if (st == IDK_OK && !t->bstats && !(t->bstats = tr_alloc(p, 4))) st = IDK_ERR_NOMEM;
    t->nfw = t->ns;
    /* loss backward */
    if (st == IDK_OK) {
        dnnl_logsoftmax_desc_t d;
        dnnl_primitive_desc_t pd = NULL;
        dnnl_status_t ds = dnnl_logsoftmax_backward_desc_init(&d, &lmd, &lmd, 1);
        if (ds == dnnl_success) ds = tr_pd(p, &pd, &d, lpd);
        if (ds != dnnl_success) st = dfail(p, "logsoftmax backward", ds);
        else if (t->tt[logits].needs_grad) {
            int direct;
            float *dl = grad_out(p, logits, NULL, &lmd, &direct, 1);
            tr_step_t *s = dl ? tr_prim(p, pd) : NULL;
            if (!s) st = p->err[0] ? IDK_ERR_DNNL : IDK_ERR_NOMEM;
            else {
                tr_arg(s, DNNL_ARG_DST, &lmd, t->logp);
                tr_arg(s, DNNL_ARG_DIFF_DST, &lmd, t->dlogp);
                tr_arg(s, DNNL_ARG_DIFF_SRC, &lmd, dl);
                st = grad_done(p, logits, NULL, &lmd, dl, direct);
            }
        }
        if (pd) dnnl_primitive_desc_destroy(pd);
    }
    for (int o = p->nops - 1; o >= 0 && st == IDK_OK; o--) st = lower(p, o, &os[o], 1);
    /* parameters that no gradient reaches (unused, or behind a non-differentiable path) get 0 */
    for (int i = 0; i < p->nt && st == IDK_OK; i++) {
        tr_tensor_t *x = &t->tt[i];
        if (x->role == IDK_TRAIN_PARAM && !x->grad_set) {
            tr_step_t *s = fn_step(p, fn_zero);
            if (!s) st = IDK_ERR_NOMEM;
            else {
                s->a = x->grad;
                s->n = (int64_t)idk_tensor_volume(&p->t[i]);
            }
        }
    }
    if (lpd) dnnl_primitive_desc_destroy(lpd);
    for (int o = 0; o < p->nops; o++)
        if (os[o].fpd) dnnl_primitive_desc_destroy(os[o].fpd);
    free(os);
    p->cur_op = -1;
    if (st == IDK_OK) st = finish_memories(p);
    if (st != IDK_OK) {
        if (!p->err[0]) idk_fail(p, st, "training plan compile failed");
        p->compiled = 2; /* unusable */
        return st;
    }
    p->err[0] = 0;
    return IDK_OK;
}

static idk_status_t ready(idk_plan_t *p) {
    if (!p) return IDK_ERR_INVALID;
    if (!p->tr || p->compiled != 1 || p->tr->input < 0) return idk_fail(p, IDK_ERR_STATE, "not a compiled training plan");
    return IDK_OK;
}

IDK_API idk_status_t idk_train_sizes(idk_plan_t *p, int64_t *nparams, int64_t *nstate, int64_t *nbstats) {
    idk_status_t st = ready(p);
    if (st != IDK_OK) return st;
    if (nparams) *nparams = p->tr->nparams;
    if (nstate) *nstate = p->tr->nstate;
    if (nbstats) *nbstats = p->tr->nbstats;
    return IDK_OK;
}

static float *array_of(idk_train_t *t, int32_t which, int64_t *n) {
    switch (which) {
    case IDK_TRAIN_PARAMS: *n = t->nparams; return t->params;
    case IDK_TRAIN_GRADS: *n = t->nparams; return t->grads;
    case IDK_TRAIN_STATE_VALUES: *n = t->nstate; return t->state;
    case IDK_TRAIN_OPT1: *n = t->nparams; return t->opt1;
    case IDK_TRAIN_OPT2: *n = t->nparams; return t->opt2;
    case IDK_TRAIN_BATCH_STATS: *n = t->nbstats; return t->bstats;
    }
    return NULL;
}

IDK_API idk_status_t idk_train_get(idk_plan_t *p, int32_t which, float *dst, int64_t n) {
    idk_status_t st = ready(p);
    if (st != IDK_OK) return st;
    int64_t have;
    float *a = array_of(p->tr, which, &have);
    if (!a) return idk_fail(p, IDK_ERR_INVALID, "array %d unknown", which);
    if (n != have || (n && !dst)) return idk_fail(p, IDK_ERR_INVALID, "array %d has %lld values, %lld asked", which, (long long)have, (long long)n);
    if (n) memcpy(dst, a, (size_t)n * 4);
    return IDK_OK;
}

IDK_API idk_status_t idk_train_set(idk_plan_t *p, int32_t which, const float *src, int64_t n) {
    idk_status_t st = ready(p);
    if (st != IDK_OK) return st;
    int64_t have;
    float *a = array_of(p->tr, which, &have);
    if (!a || which == IDK_TRAIN_BATCH_STATS) return idk_fail(p, IDK_ERR_INVALID, "array %d cannot be set", which);
    if (n != have || (n && !src)) return idk_fail(p, IDK_ERR_INVALID, "array %d has %lld values, %lld given", which, (long long)have, (long long)n);
    if (n) memcpy(a, src, (size_t)n * 4);
    return IDK_OK;
}

IDK_API idk_status_t idk_train_run(idk_plan_t *p, const float *x, const int64_t *labels, float scale, uint64_t seed,
                                   double *loss_sum, int64_t *correct) {
    idk_status_t st = ready(p);
    if (st != IDK_OK) return st;
    idk_train_t *t = p->tr;
    if (!x || !labels) return idk_fail(p, IDK_ERR_INVALID, "nil input or labels");
    if (!(scale > 0) || !isfinite(scale)) return idk_fail(p, IDK_ERR_INVALID, "gradient scale %g must be positive", (double)scale);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (p->threads > 0) omp_set_num_threads(p->threads);
    memcpy(t->tt[t->input].val, x, p->t[t->input].nbytes);
    t->labels = labels;
    t->scale = scale;
    t->seed = seed;
    for (int i = 0; i < t->ns; i++) {
        tr_step_t *s = &t->s[i];
        if (s->prim) {
            dnnl_status_t ds = dnnl_primitive_execute(s->prim, p->stream, s->nargs, s->ea);
            if (ds != dnnl_success) return idk_fail(p, IDK_ERR_DNNL, "train step %d (op %d, kind %d, %s): %s", i, s->op, s->op >= 0 && s->op < p->nops ? p->ops[s->op].kind : -1, i < t->nfw ? "forward" : "backward", dnnl_status2str(ds));
        } else if (s->fn) {
            st = s->fn(p, s);
            if (st != IDK_OK) return st;
        }
    }
    dnnl_stream_wait(p->stream);
    t->labels = NULL;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    p->last_ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    if (loss_sum) *loss_sum = t->loss;
    if (correct) *correct = t->correct;
    return IDK_OK;
}

IDK_API idk_status_t idk_train_apply_batch_stats(idk_plan_t *p, const float *bstats, int64_t n) {
    idk_status_t st = ready(p);
    if (st != IDK_OK) return st;
    idk_train_t *t = p->tr;
    if (!bstats) bstats = t->bstats;
    else if (n != t->nbstats) return idk_fail(p, IDK_ERR_INVALID, "%lld batch statistics given, plan has %lld", (long long)n, (long long)t->nbstats);
    for (int i = 0; i < t->nbn; i++) {
        tr_bn_t *b = &t->bn[i];
        float m = b->mom;
        for (int64_t c = 0; c < b->c; c++) {
            if (b->run_mean) b->run_mean[c] = b->run_mean[c] * m + bstats[b->boff + c] * (1.0f - m);
            if (b->run_var) b->run_var[c] = b->run_var[c] * m + bstats[b->boff + b->c + c] * (1.0f - m);
        }
    }
    return IDK_OK;
}

IDK_API idk_status_t idk_train_optimize(idk_plan_t *p, int32_t kind, int32_t flags, double lr, double momentum,
                                        double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    idk_status_t st = ready(p);
    if (st != IDK_OK) return st;
    idk_train_t *t = p->tr;
    if (!(lr > 0) || !isfinite(lr)) return idk_fail(p, IDK_ERR_INVALID, "learning rate %g must be positive", lr);
    if (step < 1) return idk_fail(p, IDK_ERR_INVALID, "optimizer step %lld must be >= 1", (long long)step);
    if (momentum < 0 || weight_decay < 0 || beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1 || !(eps > 0))
        return idk_fail(p, IDK_ERR_INVALID, "optimizer hyperparameters out of range");
    if (p->threads > 0) omp_set_num_threads(p->threads);
    int64_t n = t->nparams;
    float *w = t->params, *g = t->grads, *m1 = t->opt1, *m2 = t->opt2;
    const float flr = (float)lr, fwd = (float)weight_decay, fmom = (float)momentum;
    switch (kind) {
    case IDK_OPT_SGD: {
        int nesterov = flags & IDK_OPT_NESTEROV, first = step == 1;
        if (nesterov && fmom <= 0) return idk_fail(p, IDK_ERR_INVALID, "Nesterov momentum needs momentum > 0");
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + fwd * w[i];
            if (fmom > 0) {
                float b = first ? d : fmom * m1[i] + d;
                m1[i] = b;
                d = nesterov ? d + fmom * b : b;
            }
            w[i] -= flr * d;
        }
        return IDK_OK;
    }
    case IDK_OPT_ADAM:
    case IDK_OPT_ADAMW: {
        /* 1 - beta and 1 - lr*wd in double, then rounded once, as PyTorch computes them
         * (1.0f - (float)0.999 is 1.3e-5 away from 0.001f) */
        const float b1 = (float)beta1, b2 = (float)beta2, fe = (float)eps;
        const float omb1 = (float)(1.0 - beta1), omb2 = (float)(1.0 - beta2), decay = (float)(1.0 - lr * weight_decay);
        const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
        const float step_size = (float)(lr / bc1), sbc2 = (float)sqrt(bc2);
        const int decoupled = kind == IDK_OPT_ADAMW;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) {
            float d = g[i];
            if (decoupled) w[i] *= decay;
            else d += fwd * w[i];
            m1[i] = b1 * m1[i] + omb1 * d;
            m2[i] = b2 * m2[i] + omb2 * d * d;
            float denom = sqrtf(m2[i]) / sbc2 + fe;
            w[i] -= step_size * (m1[i] / denom);
        }
        return IDK_OK;
    }
    }
    return idk_fail(p, IDK_ERR_INVALID, "optimizer %d unknown", kind);
}
