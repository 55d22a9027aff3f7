//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* plan.c: plan lifecycle, tensor views, arena layout by liveness, and running. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl_debug.h>

#include "internal.h"

IDK_API const char *idk_status_str(idk_status_t s) {
    switch (s) {
    case IDK_OK: return "ok";
    case IDK_ERR_INVALID: return "invalid argument";
    case IDK_ERR_UNSUPPORTED: return "unsupported";
    case IDK_ERR_NOMEM: return "out of memory";
    case IDK_ERR_DNNL: return "oneDNN error";
    case IDK_ERR_STATE: return "wrong state";
    case IDK_ERR_RUNTIME: return "runtime error";
    }
    return "unknown status";
}

idk_status_t idk_fail(idk_plan_t *p, idk_status_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    return st;
}

static void set_threads(const idk_plan_t *p) {
    if (p->threads > 0) omp_set_num_threads(p->threads);
}

IDK_API idk_status_t idk_plan_create(idk_plan_t **out, int32_t threads) {
    if (!out) return IDK_ERR_INVALID;
    *out = NULL;
    idk_plan_t *p = calloc(1, sizeof *p);
    if (!p) return IDK_ERR_NOMEM;
    p->threads = threads;
    p->prec = IDK_F32;
    p->refs = 1;
    if (dnnl_engine_create(&p->eng, dnnl_cpu, 0) != dnnl_success) {
        free(p);
        return IDK_ERR_DNNL;
    }
    if (dnnl_stream_create(&p->stream, p->eng, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(p->eng);
        free(p);
        return IDK_ERR_DNNL;
    }
    *out = p;
    return IDK_OK;
}

/* prof_report prints, for IDK_PROFILE=1, the mean time per run of every op kind and of the
 * slowest steps, to stderr (a diagnostic: which ops outside oneDNN cost what). */
static void prof_report(const idk_plan_t *p) {
    if (!p->prof || p->prof_runs == 0) return;
    double kind_ms[256] = {0}, kind_min[256] = {0}, total = 0, tmin = 0;
    int kind_n[256] = {0};
    for (int i = 0; i < p->ns; i++) {
        const idk_step_t *s = &p->s[i];
        int k = s->op >= 0 && s->op < p->nops ? p->ops[s->op].kind & 255 : 0;
        double ms = (double)s->prof_ns / 1e6 / (double)p->prof_runs;
        kind_ms[k] += ms;
        kind_min[k] += (double)s->prof_min_ns / 1e6;
        kind_n[k]++;
        total += ms;
        tmin += (double)s->prof_min_ns / 1e6;
    }
    fprintf(stderr, "idk_profile: %lld runs, %.3f ms per run in steps (sum of each step's fastest: %.3f ms)\n",
            (long long)p->prof_runs, total, tmin);
    /* The fastest run (input copy to the last step) and the fastest sum of one run's steps:
     * their gap above the sum of each step's fastest is what the steps lose to one another's
     * jitter (on a shared machine, mostly a thread of a multi-threaded step kept waiting). */
    fprintf(stderr, "idk_profile: fastest run %.3f ms to its last step, fastest sum over one run's steps %.3f ms\n",
            (double)p->prof_run_min_ns / 1e6, (double)p->prof_steps_min_ns / 1e6);
    for (int k = 0; k < 256; k++)
        if (kind_n[k])
            fprintf(stderr, "idk_profile kind %3d: %4d steps %9.3f ms (fastest %.3f)\n", k, kind_n[k], kind_ms[k], kind_min[k]);
    for (int i = 0; i < p->ns; i++) {
        const idk_step_t *s = &p->s[i];
        double ms = (double)s->prof_ns / 1e6 / (double)p->prof_runs;
        if (p->prof < 2 && ms < total / 200) continue;
        const idk_op_t *op = s->op >= 0 && s->op < p->nops ? &p->ops[s->op] : NULL;
        fprintf(stderr, "idk_profile step %4d op %4d kind %3d %s%s %8.3f ms (fastest %.3f) out", i, s->op,
                op ? op->kind : 0, s->prim ? "dnnl" : "C   ", s->one_thread ? " 1t" : "   ", ms,
                (double)s->prof_min_ns / 1e6);
        if (op && op->nout) {
            const idk_tensor_t *t = &p->t[op->out[0]];
            for (int d = 0; d < t->ndims; d++) fprintf(stderr, "%s%lld", d ? "x" : " ", (long long)t->dims[d]);
            if (p->prof > 1) {
                fprintf(stderr, " in");
                for (int j = 0; j < op->nin && j < 3; j++) {
                    const idk_tensor_t *x = &p->t[op->in[j]];
                    fprintf(stderr, " %s", x->cdata ? "c" : "");
                    for (int d = 0; d < x->ndims; d++) fprintf(stderr, "%s%lld", d ? "x" : "", (long long)x->dims[d]);
                }
                if (op->ni) fprintf(stderr, " ia0 %lld", (long long)op->ia[0]);
            }
        }
        /* its time in the fastest run: where that run lost to the steps' own fastest */
        if (p->prof > 1) fprintf(stderr, " inbest %.3f", (double)s->prof_best_ns / 1e6);
        fprintf(stderr, "\n");
    }
}

IDK_API void idk_plan_destroy(idk_plan_t *p) {
    if (!p) return;
    /* a donor lives on while plans sharing its weights do (the last one frees it) */
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    prof_report(p);
    idk_train_free(p->tr);
    for (int i = 0; i < p->ns; i++) {
        idk_step_t *s = &p->s[i];
        if (s->prim) dnnl_primitive_destroy(s->prim);
        for (int a = 0; a < s->nargs; a++)
            if (s->arg[a].mem) dnnl_memory_destroy(s->arg[a].mem);
        free(s->arg);
        free(s->args);
        free(s->extra);
    }
    for (int i = 0; i < p->nt; i++)
        if (!p->t[i].cshared) free(p->t[i].cdata);
    /* ext buffers of constants alias cdata (freed above); reordered copies (first == -2) are
     * owned, the donor's (first == -3) borrowed */
    for (int i = 0; i < p->nops; i++) {
        free(p->ops[i].ia);
        free(p->ops[i].fa);
    }
    for (int i = 0; i < p->nb; i++)
        if (p->b[i].ext && p->b[i].first == -2) free(p->b[i].ext);
    free(p->s);
    free(p->t);
    free(p->ops);
    free(p->b);
    free(p->in);
    free(p->out);
    free(p->outbuf);
    free(p->in_alias);
    free(p->n_alias);
    free(p->alias_mem);
    free(p->in_ptr);
    free(p->arena);
    free(p->scratch);
    dnnl_stream_destroy(p->stream);
    dnnl_engine_destroy(p->eng);
    idk_plan_t *donor = p->donor;
    free(p);
    idk_plan_destroy(donor);
}

/* Weight sharing. The T sub-batch plans of a split batch (kernel/split.go) are the same
 * graph but for the batch's extent, so they hold the same constants, and where oneDNN picks
 * the same weight layout for their sub-batch sizes (equal sizes: always) the same reordered
 * copies too. A plan given a donor reads those bytes instead of holding its own: ResNet-50's
 * 100 MB of plain and reordered weights once instead of once a part, and one copy in the
 * shared cache while the parts run at once. Constants are read-only once a plan is compiled
 * (no op writes a constant's buffer: in-place sums and concatenations skip them), so the
 * plans may run at once. Matching is by content, never assumed: a constant is shared only
 * when the donor's tensor of the same id has the same type, dims and bytes, and a reordered
 * copy only when the donor holds that tensor in exactly the layout asked for; anything else
 * is copied as without a donor. */
IDK_API idk_status_t idk_plan_share_weights(idk_plan_t *p, idk_plan_t *donor) {
    if (!p || !donor || p == donor) return IDK_ERR_INVALID;
    if (p->compiled || p->nt || p->nops || p->tr || p->donor)
        return idk_fail(p, IDK_ERR_STATE, "share_weights after tensors were added");
    if (!donor->compiled || donor->tr || donor->prec != p->prec)
        return idk_fail(p, IDK_ERR_INVALID, "share_weights: the donor must be a compiled inference plan of the same precision");
    __atomic_add_fetch(&donor->refs, 1, __ATOMIC_ACQ_REL);
    p->donor = donor;
    return IDK_OK;
}

IDK_API int64_t idk_plan_const_bytes(const idk_plan_t *p, int32_t borrowed) {
    if (!p) return 0;
    int64_t n = 0;
    for (int i = 0; i < p->nt; i++)
        if (p->t[i].cdata && p->t[i].cshared == !!borrowed) n += (int64_t)p->t[i].nbytes;
    for (int i = 0; i < p->nb; i++)
        if (p->b[i].ext && p->b[i].first == (borrowed ? -3 : -2)) n += (int64_t)p->b[i].size;
    return n;
}

/* donor_const returns the donor's copy of constant tensor id when it is the same constant. */
static void *donor_const(const idk_plan_t *p, int id, int dtype, int ndims, const int64_t *dims, const void *data,
                         size_t nbytes) {
    const idk_plan_t *d = p->donor;
    if (!d || id >= d->nt) return NULL;
    const idk_tensor_t *dt = &d->t[id];
    if (!dt->cdata || dt->dtype != dtype || dt->ndims != ndims || dt->nbytes != nbytes) return NULL;
    for (int i = 0; i < ndims; i++)
        if (dt->dims[i] != dims[i]) return NULL;
    return memcmp(dt->cdata, data, nbytes) == 0 ? dt->cdata : NULL;
}

/* donor_view returns the donor's copy of shared constant tid in layout md, or NULL. */
static void *donor_view(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md) {
    idk_plan_t *d = p->donor;
    if (!d || !p->t[tid].cshared) return NULL;
    const idk_tensor_t *dt = &d->t[tid];
    for (int i = 0; i < dt->nviews; i++) {
        size_t off = 0;
        int r = idk_buf_root(d, dt->views[i].buf, &off);
        if (r >= 0 && d->b[r].ext && off == 0 && dnnl_memory_desc_equal(&dt->views[i].md, md)) return d->b[r].ext;
    }
    return NULL;
}

IDK_API int32_t idk_bf16_supported(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx) return 2;
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

IDK_API idk_status_t idk_plan_set_precision(idk_plan_t *p, int32_t dtype) {
    if (!p) return IDK_ERR_INVALID;
    if (p->compiled || p->nops || p->tr) return idk_fail(p, IDK_ERR_STATE, "set_precision after ops were added");
    if (dtype == IDK_F32) {
        p->prec = IDK_F32;
        return IDK_OK;
    }
    if (dtype != IDK_BF16) return idk_fail(p, IDK_ERR_UNSUPPORTED, "precision dtype %d not supported (f32, bf16)", dtype);
    if (!idk_bf16_supported())
        return idk_fail(p, IDK_ERR_UNSUPPORTED, "bf16 needs a CPU with AVX512_BF16 or AMX; oneDNN reports %s",
                        dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
    p->prec = IDK_BF16;
    return IDK_OK;
}

IDK_API const char *idk_plan_error(const idk_plan_t *p) { return p ? p->err : "nil plan"; }
IDK_API int64_t idk_plan_arena_bytes(const idk_plan_t *p) { return p ? (int64_t)p->arena_size : 0; }
IDK_API int64_t idk_plan_last_run_ns(const idk_plan_t *p) { return p ? p->last_ns : 0; }
IDK_API int32_t idk_plan_steps(const idk_plan_t *p) { return p ? p->ns : 0; }
IDK_API int32_t idk_noop(int32_t x) { return x + 1; }

/* env_off reports whether the switch name is set to 0 (a behaviour turned off). */
int env_off(const char *name) {
    const char *e = getenv(name);
    return e && strcmp(e, "0") == 0;
}
/* idk_thread_release frees the calling thread's OpenMP pool (libgomp's worker threads for
 * the parallel regions this thread started), which libgomp otherwise frees only when the
 * thread exits. A plan's thread (kernel/osthread.go) calls it before it ends: Go never ends
 * the process's main thread (a goroutine locked to it that returns wedges it instead), so a
 * plan whose thread happened to be the main one left its pool behind, libgomp counted its
 * worker for good, and once it counted more threads than CPUs it throttled the spinning of
 * every later plan, whose threads then slept at each primitive (MnasNet batch 1 on two
 * threads: 3.5-3.6 -> 6.0-6.3 ms in a process that had closed a model). IDK_POOL_RELEASE=0
 * leaves the pool to the thread's exit. */
IDK_API void idk_thread_release(void) {
    if (env_off("IDK_POOL_RELEASE")) return;
    omp_pause_resource_all(omp_pause_soft);
}

IDK_API int32_t idk_plan_inputs_in_place(const idk_plan_t *p) {
    int n = 0;
    for (int i = 0; p && p->n_alias && i < p->nin; i++) n += p->n_alias[i] > 0;
    return n;
}

int idk_esz(int dtype) {
    switch (dtype) {
    case IDK_F32: return 4;
    case IDK_I64: return 8;
    case IDK_BF16: return 2;
    case IDK_I8: return 1;
    }
    return 0;
}

size_t idk_tensor_volume(const idk_tensor_t *t) {
    size_t v = 1;
    for (int i = 0; i < t->ndims; i++) v *= (size_t)t->dims[i];
    return v;
}

void idk_plain_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims) {
    dnnl_dims_t d, st;
    if (ndims == 0) {
        d[0] = 1;
        ndims = 1;
    } else {
        for (int i = 0; i < ndims; i++) d[i] = dims[i];
    }
    dnnl_dim_t s = 1;
    for (int i = ndims - 1; i >= 0; i--) {
        st[i] = s;
        s *= d[i] > 0 ? d[i] : 1;
    }
    dnnl_memory_desc_init_by_strides(md, ndims, d, dnnl_f32, st);
}

#define GROW(arr, n, cap)                                                                                              \
    do {                                                                                                               \
        if ((n) >= (cap)) {                                                                                            \
            int nc_ = (cap) ? (cap) * 2 : 16;                                                                          \
            void *np_ = realloc((arr), (size_t)nc_ * sizeof *(arr));                                                   \
            if (!np_) return IDK_ERR_NOMEM;                                                                            \
            memset((char *)np_ + (size_t)(cap) * sizeof *(arr), 0, (size_t)(nc_ - (cap)) * sizeof *(arr));           \
            (arr) = np_;                                                                                               \
            (cap) = nc_;                                                                                               \
        }                                                                                                              \
    } while (0)

IDK_API idk_status_t idk_plan_add_tensor(idk_plan_t *p, int32_t dtype, int32_t ndims, const int64_t *dims,
                                         const void *data, int64_t nbytes, int32_t *out_id) {
    if (!p || !out_id) return IDK_ERR_INVALID;
    if (p->compiled) return idk_fail(p, IDK_ERR_STATE, "add_tensor after compile");
    if (ndims < 0 || ndims > IDK_MAX_DIMS || (ndims > 0 && !dims))
        return idk_fail(p, IDK_ERR_INVALID, "tensor rank %d out of range", ndims);
    if (dtype != IDK_F32 && dtype != IDK_I64 && !(dtype == IDK_I8 && data))
        return idk_fail(p, IDK_ERR_UNSUPPORTED, "tensor dtype %d not supported (f32, int64 and constant int8 only)", dtype);
    size_t vol = 1;
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 0 || dims[i] > ((int64_t)1 << 40))
            return idk_fail(p, IDK_ERR_INVALID, "tensor dim %d = %lld out of range", i, (long long)dims[i]);
        vol *= (size_t)dims[i];
        if (vol > ((size_t)1 << 34)) return idk_fail(p, IDK_ERR_INVALID, "tensor too large");
    }
    size_t want = vol * (size_t)idk_esz(dtype);
    if (data && (nbytes < 0 || (size_t)nbytes != want))
        return idk_fail(p, IDK_ERR_INVALID, "constant has %lld bytes, dims need %zu", (long long)nbytes, want);
    GROW(p->t, p->nt, p->capt);
    idk_tensor_t *t = &p->t[p->nt];
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndims = ndims;
    for (int i = 0; i < ndims; i++) t->dims[i] = dims[i];
    t->nbytes = want;
    if (data && (t->cdata = donor_const(p, p->nt, dtype, ndims, dims, data, want))) {
        t->cshared = 1;
    } else if (data) {
        t->cdata = malloc(want ? want : 1);
        if (!t->cdata) return IDK_ERR_NOMEM;
        memcpy(t->cdata, data, want);
    }
    *out_id = p->nt++;
    return IDK_OK;
}

IDK_API idk_status_t idk_plan_add_op(idk_plan_t *p, int32_t kind, int32_t nin, const int32_t *in, int32_t nout,
                                     const int32_t *out, int32_t niattr, const int64_t *iattrs, int32_t nfattr,
                                     const float *fattrs) {
    if (!p) return IDK_ERR_INVALID;
    if (p->compiled) return idk_fail(p, IDK_ERR_STATE, "add_op after compile");
    if (nin < 0 || nin > IDK_MAX_IN || nout < 1 || nout > 4 || niattr < 0 || niattr > 1024 || nfattr < 0 ||
        nfattr > 64 || (nin && !in) || !out || (niattr && !iattrs) || (nfattr && !fattrs))
        return idk_fail(p, IDK_ERR_INVALID, "op %d: bad argument counts", p->nops);
    for (int i = 0; i < nin; i++)
        if (in[i] < 0 || in[i] >= p->nt) return idk_fail(p, IDK_ERR_INVALID, "op %d: input id %d unknown", p->nops, in[i]);
    for (int i = 0; i < nout; i++)
        if (out[i] < 0 || out[i] >= p->nt || p->t[out[i]].cdata)
            return idk_fail(p, IDK_ERR_INVALID, "op %d: output id %d unknown or constant", p->nops, out[i]);
    GROW(p->ops, p->nops, p->capops);
    idk_op_t *op = &p->ops[p->nops];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->nin = nin;
    op->nout = nout;
    op->ni = niattr;
    op->nf = nfattr;
    memcpy(op->in, in, (size_t)nin * sizeof *in);
    memcpy(op->out, out, (size_t)nout * sizeof *out);
    op->ia = calloc((size_t)niattr + 1, sizeof *op->ia);
    op->fa = calloc((size_t)nfattr + 1, sizeof *op->fa);
    if (!op->ia || !op->fa) {
        free(op->ia);
        free(op->fa);
        return IDK_ERR_NOMEM;
    }
    if (niattr) memcpy(op->ia, iattrs, (size_t)niattr * sizeof *iattrs);
    if (nfattr) memcpy(op->fa, fattrs, (size_t)nfattr * sizeof *fattrs);
    p->nops++;
    idk_status_t st = idk_check_op(p, op);
    if (st != IDK_OK) {
        p->nops--;
        free(op->ia);
        free(op->fa);
    }
    return st;
}

IDK_API idk_status_t idk_plan_add_post_op(idk_plan_t *p, int32_t kind, int32_t alg, float alpha, float beta,
                                          int32_t tensor) {
    if (!p) return IDK_ERR_INVALID;
    if (p->compiled) return idk_fail(p, IDK_ERR_STATE, "add_post_op after compile");
    if (p->nops == 0) return idk_fail(p, IDK_ERR_STATE, "post-op before any op");
    idk_op_t *op = &p->ops[p->nops - 1];
    if (op->kind != IDK_OP_CONV && op->kind != IDK_OP_MATMUL && op->kind != IDK_OP_QCONV && op->kind != IDK_OP_QMATMUL)
        return idk_fail(p, IDK_ERR_INVALID, "post-ops only follow CONV, QCONV, MATMUL or QMATMUL");
    if (op->npost >= IDK_MAX_POST) return idk_fail(p, IDK_ERR_UNSUPPORTED, "too many post-ops");
    if (kind == IDK_POST_SUM) {
        if (tensor < 0 || tensor >= p->nt) return idk_fail(p, IDK_ERR_INVALID, "sum post-op tensor %d unknown", tensor);
        const idk_tensor_t *a = &p->t[tensor], *o = &p->t[op->out[0]];
        if (a->dtype != IDK_F32 || a->ndims != o->ndims || memcmp(a->dims, o->dims, sizeof a->dims[0] * (size_t)a->ndims))
            return idk_fail(p, IDK_ERR_INVALID, "sum post-op tensor %d does not match the output's dims", tensor);
        if (op->nin >= IDK_MAX_IN) return idk_fail(p, IDK_ERR_UNSUPPORTED, "too many inputs");
    } else if (kind != IDK_POST_ELTWISE || alg < IDK_ELT_RELU || (alg > IDK_ELT_LINEAR && alg != IDK_ELT_SWISH && alg != IDK_ELT_GELU_ERF && alg != IDK_ELT_GELU_TANH)) {
        return idk_fail(p, IDK_ERR_INVALID, "bad post-op kind %d alg %d", kind, alg);
    }
    op->post[op->npost++] = (idk_post_t){kind, alg, alpha, beta, tensor};
    return IDK_OK;
}

IDK_API idk_status_t idk_plan_set_io(idk_plan_t *p, int32_t nin, const int32_t *in, int32_t nout, const int32_t *out) {
    if (!p) return IDK_ERR_INVALID;
    if (p->compiled) return idk_fail(p, IDK_ERR_STATE, "set_io after compile");
    if (nin < 0 || nout < 1 || (nin && !in) || !out || nin > 4096 || nout > 4096)
        return idk_fail(p, IDK_ERR_INVALID, "bad io counts");
    for (int i = 0; i < nin; i++)
        if (in[i] < 0 || in[i] >= p->nt || p->t[in[i]].cdata)
            return idk_fail(p, IDK_ERR_INVALID, "input id %d unknown or constant", in[i]);
    for (int i = 0; i < nout; i++)
        if (out[i] < 0 || out[i] >= p->nt) return idk_fail(p, IDK_ERR_INVALID, "output id %d unknown", out[i]);
    free(p->in);
    free(p->out);
    free(p->outbuf);
    p->in = malloc(sizeof(int) * (size_t)(nin + 1));
    p->out = malloc(sizeof(int) * (size_t)nout);
    p->outbuf = calloc((size_t)nout, sizeof(int));
    if (!p->in || !p->out || !p->outbuf) return IDK_ERR_NOMEM;
    for (int i = 0; i < nin; i++) p->in[i] = in[i];
    for (int i = 0; i < nout; i++) p->out[i] = out[i];
    p->nin = nin;
    p->nout = nout;
    return IDK_OK;
}

int idk_new_buffer(idk_plan_t *p, size_t size) {
    if (p->nb >= p->capb) {
        int nc = p->capb ? p->capb * 2 : 64;
        idk_buffer_t *nb = realloc(p->b, (size_t)nc * sizeof *nb);
        if (!nb) return -1;
        p->b = nb;
        p->capb = nc;
    }
    p->b[p->nb] = (idk_buffer_t){size, 0, NULL, -1, -1, -1, 0};
    return p->nb++;
}

idk_step_t *idk_new_step(idk_plan_t *p) {
    if (p->ns >= p->caps) {
        int nc = p->caps ? p->caps * 2 : 64;
        idk_step_t *ns = realloc(p->s, (size_t)nc * sizeof *ns);
        if (!ns) return NULL;
        p->s = ns;
        p->caps = nc;
    }
    idk_step_t *s = &p->s[p->ns++];
    memset(s, 0, sizeof *s);
    s->op = p->cur_op;
    return s;
}

void idk_step_arg(idk_step_t *s, int kind, const dnnl_memory_desc_t *md, int buf) {
    if (s->nargs >= s->capargs) {
        int nc = s->capargs ? s->capargs * 2 : 4;
        idk_arg_t *na = realloc(s->arg, (size_t)nc * sizeof *na);
        if (!na) {
            s->oom = 1;
            return;
        }
        s->arg = na;
        s->capargs = nc;
    }
    s->arg[s->nargs++] = (idk_arg_t){kind, buf, *md, NULL};
}

void *idk_buf_ptr(idk_plan_t *p, int buf) {
    if (buf < 0) return p->scratch;
    size_t off = 0;
    buf = idk_buf_root(p, buf, &off);
    return p->b[buf].ext ? p->b[buf].ext : p->arena + p->b[buf].off + off;
}

/* idk_buf_root returns the buffer that buf is an alias within (buf itself if none), adding
 * buf's byte offset there to *off. */
int idk_buf_root(const idk_plan_t *p, int buf, size_t *off) {
    while (buf >= 0 && p->b[buf].parent >= 0) {
        *off += p->b[buf].poff;
        buf = p->b[buf].parent;
    }
    return buf;
}

/* idk_buf_alias makes buffer buf (a root, in the arena) bytes [off, off + its size) of
 * buffer parent, with every alias within it. -1 if that does not fit or would loop. */
int idk_buf_alias(idk_plan_t *p, int buf, int parent, size_t off) {
    size_t po = 0;
    if (buf < 0 || parent < 0 || p->b[buf].parent >= 0 || p->b[buf].ext || idk_buf_root(p, parent, &po) == buf ||
        off + p->b[buf].size > p->b[parent].size)
        return -1;
    p->b[buf].parent = parent;
    p->b[buf].poff = off;
    return 0;
}

/* idk_bufs_overlap: buffers a and b share bytes (one is an alias within the other, or both
 * within a third, over overlapping ranges). */
int idk_bufs_overlap(const idk_plan_t *p, int a, int b) {
    if (a < 0 || b < 0) return a == b;
    size_t oa = 0, ob = 0;
    if (idk_buf_root(p, a, &oa) != idk_buf_root(p, b, &ob)) return 0;
    return oa < ob + p->b[b].size && ob < oa + p->b[a].size;
}

int idk_primary(idk_plan_t *p, int tid, idk_view_t **v) {
    idk_tensor_t *t = &p->t[tid];
    if (t->nviews == 0) return -1;
    *v = &t->views[0];
    return 0;
}

int idk_set_output(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md, int plain, int buf) {
    idk_tensor_t *t = &p->t[tid];
    if (t->nviews != 0) return -1; /* written twice */
    t->views[0].plain = plain;
    if (md) t->views[0].md = *md;
    else idk_plain_md(&t->views[0].md, t->ndims, t->dims);
    t->views[0].buf = buf;
    t->nviews = 1;
    return 0;
}

/* reorder_now converts a constant into layout md at compile time. */
static int reorder_now(idk_plan_t *p, const dnnl_memory_desc_t *src, void *sdata, const dnnl_memory_desc_t *dst,
                       int *outbuf) {
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
    if (!ok) {
        free(d);
        return -1;
    }
    int b = idk_new_buffer(p, sz);
    if (b < 0) {
        free(d);
        return -1;
    }
    p->b[b].ext = d;
    p->b[b].first = -2; /* marks an owned external buffer */
    *outbuf = b;
    return 0;
}

static idk_status_t add_view(idk_plan_t *p, idk_tensor_t *t, const dnnl_memory_desc_t *md, int plain, int buf) {
    if (t->nviews >= IDK_MAX_VIEWS) return idk_fail(p, IDK_ERR_UNSUPPORTED, "too many layouts of one tensor");
    t->views[t->nviews++] = (idk_view_t){*md, plain, buf};
    return IDK_OK;
}

/* idk_get_view returns (in *buf) a buffer holding tensor tid in layout md,
 * adding a reorder (at run time, or now for constants) when needed. */
int idk_get_view(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md, int *buf) {
    idk_tensor_t *t = &p->t[tid];
    if (t->nviews == 0) {
        idk_fail(p, IDK_ERR_INVALID, "op %d reads tensor %d before it is written", p->cur_op, tid);
        return -1;
    }
    for (int i = 0; i < t->nviews; i++)
        if (t->dtype == IDK_F32 && dnnl_memory_desc_equal(&t->views[i].md, md)) {
            *buf = t->views[i].buf;
            return 0;
        }
    if (t->dtype != IDK_F32) {
        idk_fail(p, IDK_ERR_UNSUPPORTED, "op %d: non-float tensor %d needs a layout change", p->cur_op, tid);
        return -1;
    }
    idk_view_t *src = &t->views[0];
    if (t->cdata) {
        int b;
        void *shared = donor_view(p, tid, md);
        if (shared) {
            if ((b = idk_new_buffer(p, dnnl_memory_desc_get_size(md))) < 0) return -1;
            p->b[b].ext = shared;
            p->b[b].first = -3; /* the donor's, not freed with this plan */
            if (add_view(p, t, md, 0, b) != IDK_OK) return -1;
            *buf = b;
            return 0;
        }
        if (reorder_now(p, &src->md, idk_buf_ptr(p, src->buf), md, &b) != 0) {
            idk_fail(p, IDK_ERR_DNNL, "op %d: reorder of constant tensor %d failed", p->cur_op, tid);
            return -1;
        }
        if (add_view(p, t, md, 0, b) != IDK_OK) return -1;
        *buf = b;
        return 0;
    }
    int b = idk_new_buffer(p, dnnl_memory_desc_get_size(md));
    if (b < 0) return -1;
    int fast = idk_block_reorder(p, &src->md, src->buf, md, b);
    if (fast < 0) return -1;
    if (fast) {
        int plain = 0; /* neither layout idk_block_reorder takes is plain */
        if (add_view(p, t, md, plain, b) != IDK_OK) return -1;
        *buf = b;
        return 0;
    }
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, &src->md, p->eng, md, p->eng, NULL) != dnnl_success) {
        idk_fail(p, IDK_ERR_DNNL, "op %d: no reorder for tensor %d", p->cur_op, tid);
        return -1;
    }
    idk_step_t *s = b < 0 ? NULL : idk_new_step(p);
    if (!s || dnnl_primitive_create(&s->prim, pd) != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        idk_fail(p, IDK_ERR_DNNL, "op %d: reorder primitive failed", p->cur_op);
        return -1;
    }
    dnnl_primitive_desc_destroy(pd);
    idk_step_arg(s, DNNL_ARG_FROM, &src->md, src->buf);
    idk_step_arg(s, DNNL_ARG_TO, md, b);
    int plain = 0;
    dnnl_memory_desc_t pm;
    idk_plain_md(&pm, t->ndims, t->dims);
    plain = dnnl_memory_desc_equal(&pm, md);
    if (add_view(p, t, md, plain, b) != IDK_OK) return -1;
    *buf = b;
    return 0;
}

int idk_get_plain(idk_plan_t *p, int tid, int *buf) {
    idk_tensor_t *t = &p->t[tid];
    for (int i = 0; i < t->nviews; i++)
        if (t->views[i].plain) {
            *buf = t->views[i].buf;
            return 0;
        }
    dnnl_memory_desc_t md;
    idk_plain_md(&md, t->ndims, t->dims);
    return idk_get_view(p, tid, &md, buf);
}

/* idk_arena_limit bounds one plan's activation memory: 8 GiB, or $IDK_MAX_ARENA_MB. */
static size_t idk_arena_limit(void) {
    const char *e = getenv("IDK_MAX_ARENA_MB");
    long v = e ? atol(e) : 0;
    return v > 0 ? (size_t)v << 20 : (size_t)8 << 30;
}

/* place assigns arena offsets: buffers whose lifetimes overlap never share bytes
 * (largest first, each at the lowest offset free during its lifetime). */
static idk_status_t place(idk_plan_t *p) {
    int n = 0;
    int *order = malloc(sizeof(int) * (size_t)(p->nb + 1));
    int *placed = malloc(sizeof(int) * (size_t)(p->nb + 1));
    if (!order || !placed) {
        free(order);
        free(placed);
        return IDK_ERR_NOMEM;
    }
    for (int i = 0; i < p->nb; i++)
        if (!p->b[i].ext && p->b[i].parent < 0) order[n++] = i; /* aliases go with their roots */
    for (int i = 1; i < n; i++) {
        int k = order[i], j = i - 1;
        while (j >= 0 && (p->b[order[j]].size < p->b[k].size)) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = k;
    }
    size_t total = 0;
    int np = 0;
    for (int i = 0; i < n; i++) {
        idk_buffer_t *b = &p->b[order[i]];
        size_t sz = (b->size + 63) / 64 * 64;
        size_t off = 0;
        for (;;) {
            int moved = 0;
            for (int j = 0; j < np; j++) {
                idk_buffer_t *o = &p->b[placed[j]];
                if (o->last < b->first || b->last < o->first) continue;
                size_t osz = (o->size + 63) / 64 * 64;
                if (off < o->off + osz && o->off < off + sz) {
                    off = o->off + osz;
                    moved = 1;
                }
            }
            if (!moved) break;
        }
        b->off = off;
        placed[np++] = order[i];
        if (off + sz > total) total = off + sz;
    }
    free(order);
    free(placed);
    p->arena_size = total;
    if (total > idk_arena_limit())
        return idk_fail(p, IDK_ERR_NOMEM, "activations need %zu MiB, over the limit of %zu MiB (IDK_MAX_ARENA_MB)",
                        total >> 20, idk_arena_limit() >> 20);
    p->arena = aligned_alloc(64, total + 64);
    if (!p->arena) return IDK_ERR_NOMEM;
    memset(p->arena, 0, total + 64);
    return IDK_OK;
}

static void touch(idk_plan_t *p, int buf, int step) {
    size_t off = 0;
    buf = idk_buf_root(p, buf, &off); /* an alias keeps its whole root alive */
    if (buf < 0 || p->b[buf].ext) return;
    if (p->b[buf].first < 0 || step < p->b[buf].first) p->b[buf].first = step;
    if (step > p->b[buf].last) p->b[buf].last = step;
}

/* reads_only reports whether a primitive argument of this kind is only read (a source,
 * weights, a bias or a binary post-op's operand), never written. */
static int reads_only(int kind) {
    if (kind & DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE)
        return (kind & (DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE - 1)) == DNNL_ARG_SRC_1;
    return kind == DNNL_ARG_SRC_0 || kind == DNNL_ARG_SRC_1 || kind == DNNL_ARG_SRC_2 || kind == DNNL_ARG_WEIGHTS_0 ||
           kind == DNNL_ARG_WEIGHTS_1 || kind == DNNL_ARG_BIAS;
}

/* alias_inputs lets oneDNN read an input in the caller's buffer instead of a copy in the
 * arena: the run then skips copying it (a 224x224 image is 600 KB, 20-40 us of a 3.6 ms
 * batch-1 run). Only for an input that primitives alone read, in a layout without padding
 * (moving the data handle of a padded one would zero its padding, in the caller's memory),
 * from its whole buffer, and never write; anything else keeps the copy. Each run points
 * their memory objects at the buffer given, when it differs from the last run's.
 * IDK_INPUT_ALIAS=0 copies every input. */
static idk_status_t alias_inputs(idk_plan_t *p) {
    if (env_off("IDK_INPUT_ALIAS")) return IDK_OK;
    int total = 0;
    for (int si = 0; si < p->ns; si++) total += p->s[si].nargs;
    p->in_alias = calloc((size_t)p->nin + 1, sizeof(int));
    p->n_alias = calloc((size_t)p->nin + 1, sizeof(int));
    p->in_ptr = calloc((size_t)p->nin + 1, sizeof(void *));
    p->alias_mem = calloc((size_t)total + 1, sizeof(dnnl_memory_t));
    if (!p->in_alias || !p->n_alias || !p->in_ptr || !p->alias_mem) return IDK_ERR_NOMEM;
    int used = 0;
    for (int i = 0; i < p->nin; i++) {
        const idk_tensor_t *t = &p->t[p->in[i]];
        int b = t->views[0].buf, ok = t->nbytes > 0 && !t->is_out && p->b[b].parent < 0 && !p->b[b].ext;
        for (int j = 0; ok && j < p->nb; j++) {
            size_t off = 0;
            if (j != b && idk_buf_root(p, j, &off) == b) ok = 0; /* something lives inside it */
        }
        for (int j = 0; ok && j < p->nout; j++) {
            size_t off = 0;
            if (idk_buf_root(p, p->outbuf[j], &off) == b) ok = 0;
        }
        int n = 0;
        for (int si = 0; ok && si < p->ns; si++) {
            const idk_step_t *s = &p->s[si];
            for (int a = 0; ok && a < s->nb; a++) {
                size_t off = 0;
                if (idk_buf_root(p, s->bufs[a], &off) == b) ok = 0; /* a C loop reads it */
            }
            for (int a = 0; ok && a < s->nargs; a++) {
                const idk_arg_t *g = &s->arg[a];
                if (g->buf != b) continue;
                const dnnl_memory_desc_t *md = &g->md;
                int padded = md->offset0 != 0;
                for (int d = 0; d < md->ndims; d++) padded |= md->padded_dims[d] != md->dims[d];
                if (!s->prim || !reads_only(g->kind) || padded || md->format_kind != dnnl_blocked)
                    ok = 0;
                else
                    p->alias_mem[used + n++] = g->mem;
            }
        }
        if (ok && n > 0) {
            p->in_alias[i] = used;
            p->n_alias[i] = n;
            used += n;
        }
    }
    return IDK_OK;
}

IDK_API idk_status_t idk_plan_compile(idk_plan_t *p) {
    if (!p) return IDK_ERR_INVALID;
    if (p->compiled) return idk_fail(p, IDK_ERR_STATE, "compile twice");
    if (p->tr) return idk_fail(p, IDK_ERR_STATE, "a plan with training roles compiles with idk_train_compile");
    if (p->nout == 0) return idk_fail(p, IDK_ERR_STATE, "set_io not called");
    set_threads(p);
    /* last use of every tensor, by op index */
    for (int i = 0; i < p->nt; i++) p->t[i].lastuse = -1;
    for (int o = 0; o < p->nops; o++) {
        idk_op_t *op = &p->ops[o];
        for (int i = 0; i < op->nin; i++) p->t[op->in[i]].lastuse = o;
        for (int i = 0; i < op->npost; i++)
            if (op->post[i].kind == IDK_POST_SUM) p->t[op->post[i].tensor].lastuse = o;
    }
    for (int i = 0; i < p->nout; i++) p->t[p->out[i]].is_out = 1;
    for (int i = 0; i < p->nin; i++) {
        idk_tensor_t *t = &p->t[p->in[i]];
        if (t->is_in || t->nviews) return idk_fail(p, IDK_ERR_INVALID, "input %d listed twice", p->in[i]);
        t->is_in = 1;
        int b = idk_new_buffer(p, t->nbytes);
        if (b < 0) return IDK_ERR_NOMEM;
        p->b[b].first = 0;
        idk_set_output(p, p->in[i], NULL, 1, b);
    }
    for (int i = 0; i < p->nt; i++) {
        idk_tensor_t *t = &p->t[i];
        if (!t->cdata) continue;
        int b = idk_new_buffer(p, t->nbytes);
        if (b < 0) return IDK_ERR_NOMEM;
        p->b[b].ext = t->cdata;
        idk_set_output(p, i, NULL, 1, b);
    }
    for (int o = 0; o < p->nops; o++) {
        /* a dense 2-D convolution with a kernel larger than 1x1, other than a first one */
        const idk_op_t *op = &p->ops[o];
        if (op->kind == IDK_OP_CONV && op->ni == 10 && op->ia[0] == 2 && op->ia[9] == 1 && p->t[op->in[0]].dims[1] >= 8 &&
            (p->t[op->in[1]].dims[2] > 1 || p->t[op->in[1]].dims[3] > 1))
            p->dense_kxk = 1;
        /* a depthwise 2-D convolution (one input channel per group) */
        if (op->kind == IDK_OP_CONV && op->ni == 10 && op->ia[0] == 2 && op->ia[9] > 1 && p->t[op->in[1]].dims[1] == 1)
            p->depthwise = 1;
    }
    for (int o = 0; o < p->nops; o++) {
        p->cur_op = o;
        /* a tiny op's primitives are made for one thread (oneDNN sizes its work split when it
         * creates them) and its steps run with one */
        int s0 = p->ns, tiny = idk_op_tiny(p, &p->ops[o]), nthr = omp_get_max_threads();
        if (tiny) omp_set_num_threads(1);
        idk_status_t st = idk_lower_op(p, o);
        if (tiny) {
            omp_set_num_threads(nthr);
            for (int i = s0; i < p->ns; i++) p->s[i].one_thread = 1;
        }
        if (st != IDK_OK) return st;
        if (p->fused_next) {
            /* op o + 1 runs inside op o's primitive (a depthwise convolution fused into the 1x1
             * before it): nothing left to lower for it */
            p->fused_next = 0;
            o++;
        }
    }
    p->cur_op = -1;
    for (int i = 0; i < p->nout; i++) {
        if (p->t[p->out[i]].nviews == 0) return idk_fail(p, IDK_ERR_INVALID, "output %d is never written", p->out[i]);
        if (idk_get_plain(p, p->out[i], &p->outbuf[i]) != 0) return IDK_ERR_DNNL;
    }
    /* aliases point at their roots directly (a DenseNet block's first input is an alias
     * within each of its concatenations in turn) */
    for (int i = 0; i < p->nb; i++) {
        size_t off = 0;
        int r = idk_buf_root(p, i, &off);
        if (r != i) {
            p->b[i].parent = r;
            p->b[i].poff = off;
        }
    }
    /* liveness */
    for (int i = 0; i < p->nb; i++)
        if (!p->b[i].ext) p->b[i].first = p->b[i].first == 0 ? 0 : -1;
    for (int i = 0; i < p->nin; i++) touch(p, p->t[p->in[i]].views[0].buf, 0);
    for (int si = 0; si < p->ns; si++) {
        idk_step_t *s = &p->s[si];
        if (s->oom) return idk_fail(p, IDK_ERR_NOMEM, "step %d: out of memory", si);
        for (int a = 0; a < s->nargs; a++) touch(p, s->arg[a].buf, si);
        for (int a = 0; a < s->nb; a++) touch(p, s->bufs[a], si);
    }
    for (int i = 0; i < p->nout; i++) touch(p, p->outbuf[i], p->ns);
    for (int i = 0; i < p->nb; i++)
        if (!p->b[i].ext && p->b[i].first < 0) p->b[i].first = p->b[i].last = 0;
    p->err[0] = 0;
    idk_status_t st = place(p);
    if (st != IDK_OK) return p->err[0] ? st : idk_fail(p, st, "arena of %zu bytes: allocation failed", p->arena_size);
    /* memory objects now that every buffer has an address */
    size_t scratch = 0;
    for (int si = 0; si < p->ns; si++) {
        idk_step_t *s = &p->s[si];
        for (int a = 0; a < s->nargs; a++) {
            if (s->arg[a].buf < 0) {
                size_t z = dnnl_memory_desc_get_size(&s->arg[a].md);
                if (z > scratch) scratch = z;
            }
        }
    }
    p->scratch_size = scratch;
    p->scratch = aligned_alloc(64, (scratch + 63) / 64 * 64 + 64);
    if (!p->scratch) return IDK_ERR_NOMEM;
    for (int si = 0; si < p->ns; si++) {
        idk_step_t *s = &p->s[si];
        if (s->nargs && !(s->args = calloc((size_t)s->nargs, sizeof *s->args))) return IDK_ERR_NOMEM;
        for (int a = 0; a < s->nargs; a++) {
            idk_arg_t *g = &s->arg[a];
            if (dnnl_memory_create(&g->mem, &g->md, p->eng, idk_buf_ptr(p, g->buf)) != dnnl_success)
                return idk_fail(p, IDK_ERR_DNNL, "memory object for step %d failed", si);
            s->args[a] = (dnnl_exec_arg_t){g->kind, g->mem};
        }
    }
    if ((st = alias_inputs(p)) != IDK_OK) return st;
    const char *prof = getenv("IDK_PROFILE");
    p->prof = prof && prof[0] && prof[0] != '0' ? atoi(prof) > 1 ? 2 : 1 : 0;
    p->compiled = 1;
    return IDK_OK;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

IDK_API idk_status_t idk_plan_run(idk_plan_t *p, const void *const *in, void *const *out) {
    if (!p) return IDK_ERR_INVALID;
    int64_t t0 = now_ns();
    if (!p->compiled || p->tr) return idk_fail(p, IDK_ERR_STATE, "run before compile (or of a training plan)");
    if ((p->nin && !in) || !out) return idk_fail(p, IDK_ERR_INVALID, "nil buffers");
    set_threads(p);
    for (int i = 0; i < p->nin; i++) {
        idk_tensor_t *t = &p->t[p->in[i]];
        if (!in[i] && t->nbytes) return idk_fail(p, IDK_ERR_INVALID, "input %d is nil", i);
        if (p->n_alias && p->n_alias[i]) {
            if (p->in_ptr[i] != in[i]) {
                for (int k = 0; k < p->n_alias[i]; k++)
                    if (dnnl_memory_set_data_handle(p->alias_mem[p->in_alias[i] + k], (void *)in[i]) != dnnl_success)
                        return idk_fail(p, IDK_ERR_DNNL, "input %d: set_data_handle failed", i);
                p->in_ptr[i] = in[i];
            }
            continue;
        }
        if (t->nbytes) memcpy(idk_buf_ptr(p, t->views[0].buf), in[i], t->nbytes);
    }
    int one = 0, nthr = omp_get_max_threads();
    int64_t steps_ns = 0;
    for (int si = 0; si < p->ns; si++) {
        idk_step_t *s = &p->s[si];
        int64_t ts = p->prof ? now_ns() : 0;
        if (s->one_thread != one) {
            one = s->one_thread;
            omp_set_num_threads(one ? 1 : nthr);
        }
        idk_status_t st = IDK_OK;
        if (s->prim) {
            dnnl_status_t ds = dnnl_primitive_execute(s->prim, p->stream, s->nargs, s->args);
            if (ds != dnnl_success) st = idk_fail(p, IDK_ERR_DNNL, "step %d: %s", si, dnnl_status2str(ds));
        } else if (s->fn) {
            st = s->fn(p, s);
        }
        if (st != IDK_OK) {
            omp_set_num_threads(nthr);
            return st;
        }
        if (p->prof) {
            int64_t d = now_ns() - ts;
            s->prof_ns += d;
            s->prof_last_ns = d;
            steps_ns += d;
            if (p->prof_runs == 0 || d < s->prof_min_ns) s->prof_min_ns = d;
        }
    }
    if (one) omp_set_num_threads(nthr);
    dnnl_stream_wait(p->stream);
    if (p->prof) {
        int64_t run_ns = now_ns() - t0;
        if (p->prof_runs == 0 || run_ns < p->prof_run_min_ns) {
            p->prof_run_min_ns = run_ns;
            for (int si = 0; si < p->ns; si++) p->s[si].prof_best_ns = p->s[si].prof_last_ns;
        }
        if (p->prof_runs == 0 || steps_ns < p->prof_steps_min_ns) p->prof_steps_min_ns = steps_ns;
        p->prof_runs++;
    }
    for (int i = 0; i < p->nout; i++) {
        idk_tensor_t *t = &p->t[p->out[i]];
        if (!out[i] && t->nbytes) return idk_fail(p, IDK_ERR_INVALID, "output %d is nil", i);
        if (t->nbytes) memcpy(out[i], idk_buf_ptr(p, p->outbuf[i]), t->nbytes);
    }
    p->last_ns = now_ns() - t0;
    return IDK_OK;
}
