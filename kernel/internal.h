/* internal.h: the plan's private structures, shared by the kernel's C files. */
#ifndef IDUNNO_KERNEL_INTERNAL_H
#define IDUNNO_KERNEL_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>

#include "idunno_kernel.h"

#define IDK_MAX_VIEWS 6
#define IDK_MAX_POST 8
#define IDK_MAX_IN 64

/* A buffer is one region of storage: in the arena (ext == NULL, placed at off
 * by liveness) or outside it (ext: a constant owned by the plan). */
typedef struct {
    size_t size;
    size_t off;
    void *ext;
    int first, last; /* step indices of first write and last use */
    /* an alias (parent >= 0) is bytes [poff, poff + size) of buffer parent, placed with it:
     * an in-place concatenation's inputs (ops.c, concat_in_place) */
    int parent;
    size_t poff;
} idk_buffer_t;

/* A view is one layout in which a tensor's value is stored. */
typedef struct {
    dnnl_memory_desc_t md; /* valid for f32 only */
    int plain;             /* row-major */
    int buf;
} idk_view_t;

typedef struct {
    int dtype, ndims;
    int64_t dims[IDK_MAX_DIMS];
    void *cdata; /* constant contents, plain (owned unless cshared) */
    int cshared; /* cdata is the donor plan's (idk_plan_share_weights), not freed here */
    size_t nbytes;
    int nviews;
    idk_view_t views[IDK_MAX_VIEWS];
    int lastuse; /* index of the last op reading it */
    int is_in, is_out;
    int nhwc_stem; /* output of a 7x7 first convolution lowered on nhwc in a network otherwise
                    * blocked (ops.c, lower_conv): the 1x1 convolutions after it take nChw16c */
} idk_tensor_t;

typedef struct {
    int kind, alg;
    float alpha, beta;
    int tensor;
} idk_post_t;

typedef struct {
    int kind;
    int nin, nout, ni, nf;
    int in[IDK_MAX_IN], out[4];
    int64_t *ia;
    float *fa;
    int npost;
    idk_post_t post[IDK_MAX_POST];
    int fused; /* done by the op before it (a ReLU after BatchNormalization: fuse_norm_relu) */
} idk_op_t;

/* One argument of a oneDNN primitive: its kind, layout and buffer (-1: the scratchpad). */
typedef struct {
    int kind, buf;
    dnnl_memory_desc_t md;
    dnnl_memory_t mem;
} idk_arg_t;

struct idk_step;
typedef idk_status_t (*idk_step_fn)(idk_plan_t *p, struct idk_step *s);

/* A step is one thing done at run time: a oneDNN primitive, or a C loop. */
typedef struct idk_step {
    dnnl_primitive_t prim;
    int nargs, capargs, oom;
    idk_arg_t *arg;        /* owned, nargs entries */
    dnnl_exec_arg_t *args; /* owned, built at compile */
    /* C loops */
    idk_step_fn fn;
    int nb;
    int bufs[IDK_MAX_IN + 1];
    int esz, nd, alg;
    int64_t d[IDK_MAX_DIMS], sa[IDK_MAX_DIMS], sb[IDK_MAX_DIMS], base, n1, n2, n3;
    int64_t *extra; /* owned */
    float fv;
    size_t bytes;
    int op;               /* the op it was lowered from (-1: none) */
    int one_thread;       /* a tiny op's step: created and run with one OpenMP thread (idk_op_tiny) */
    int64_t prof_ns;      /* IDK_PROFILE: time spent in it over all runs */
    int64_t prof_min_ns;  /* IDK_PROFILE: its fastest run (robust to other load) */
    int64_t prof_last_ns, prof_best_ns; /* IDK_PROFILE: its time in the last run, in the fastest run */
} idk_step_t;

typedef struct idk_train idk_train_t;

struct idk_plan {
    idk_train_t *tr; /* training plans only (train.c) */
    int threads;
    int compiled;
    char err[512];
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int nt, capt;
    idk_tensor_t *t;
    int nops, capops;
    idk_op_t *ops;
    int nb, capb;
    idk_buffer_t *b;
    int ns, caps;
    idk_step_t *s;
    int nin, nout;
    int *in, *out;
    int *outbuf;
    char *arena;
    size_t arena_size;
    void *scratch;
    size_t scratch_size;
    int64_t last_ns;
    int cur_op;
    int dense_kxk; /* has dense convolutions larger than 1x1: layout heuristic (ops.c, lower_conv) */
    int depthwise; /* has depthwise convolutions: layout heuristic (ops.c, wino_min_pixels) */
    int fused_next; /* the op being lowered also lowered the next one (ops.c, lower_conv_dw) */
    int prof;      /* IDK_PROFILE set at compile: time every step, print a table at destroy */
    int64_t prof_runs;
    int64_t prof_run_min_ns, prof_steps_min_ns; /* IDK_PROFILE: fastest run, fastest sum of one run's steps */
    int prec;       /* compute type of Conv and MatMul: IDK_F32 or IDK_BF16 (idk_plan_set_precision) */
    /* weight sharing (idk_plan_share_weights): the plan whose constants this one reads, and
     * the holders of this plan (itself and every plan sharing its weights; it is freed when
     * the last one lets go) */
    idk_plan_t *donor;
    int refs;
    /* inputs read in place (plan.c, alias_inputs): for input i, in_alias[i] is the first of
     * its n_alias[i] memory objects in alias_mem, which read the caller's buffer directly
     * instead of a copy in the arena; in_ptr[i] is the pointer they hold now */
    int *in_alias, *n_alias;
    dnnl_memory_t *alias_mem;
    const void **in_ptr;
};

idk_status_t idk_fail(idk_plan_t *p, idk_status_t st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int idk_new_buffer(idk_plan_t *p, size_t size);
idk_step_t *idk_new_step(idk_plan_t *p);
void idk_step_arg(idk_step_t *s, int kind, const dnnl_memory_desc_t *md, int buf);
void *idk_buf_ptr(idk_plan_t *p, int buf);
int idk_buf_root(const idk_plan_t *p, int buf, size_t *off);
int idk_buf_alias(idk_plan_t *p, int buf, int parent, size_t off);
int idk_bufs_overlap(const idk_plan_t *p, int a, int b);
size_t idk_tensor_volume(const idk_tensor_t *t);
int idk_esz(int dtype);
/* env_off reports whether the switch name (an IDK_ environment variable) is set to 0. */
int env_off(const char *name);
void idk_plain_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims);

/* view helpers */
int idk_get_view(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md, int *buf);
int idk_get_plain(idk_plan_t *p, int tid, int *buf);
int idk_primary(idk_plan_t *p, int tid, idk_view_t **v);
int idk_set_output(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md, int plain, int buf);

void idk_train_free(idk_train_t *t);

/* helpers of ops.c shared with quant.c */
dnnl_primitive_attr_t idk_new_attr(void);
idk_status_t idk_finish_prim(idk_plan_t *p, dnnl_primitive_desc_t pd, idk_step_t **out);
int idk_new_out(idk_plan_t *p, int tid, const dnnl_memory_desc_t *md);
idk_status_t idk_with_post_ops(idk_plan_t *p, const idk_op_t *op, dnnl_primitive_attr_t attr, int *sum_tid);
int idk_dst_for_sum(idk_plan_t *p, const idk_op_t *op, int sum_tid, const dnnl_memory_desc_t *dmd);

/* the int8 ops (quant.c) */
#define IDK_IS_QUANT_OP(k) ((k) >= IDK_OP_QUANTIZE && (k) <= IDK_OP_QMATMUL)
idk_status_t idk_check_quant(idk_plan_t *p, const idk_op_t *op);
idk_status_t idk_lower_quant(idk_plan_t *p, const idk_op_t *op);

/* lowering of one op into steps (ops.c) */
idk_status_t idk_lower_op(idk_plan_t *p, int opi);
idk_status_t idk_check_op(idk_plan_t *p, const idk_op_t *op);
/* an op small enough to run on one thread (ops.c) */
int idk_op_tiny(const idk_plan_t *p, const idk_op_t *op);
/* a C step for a run-time reorder oneDNN does slowly (ops.c); 1 if added, 0 if not its case */
int idk_block_reorder(idk_plan_t *p, const dnnl_memory_desc_t *src, int sb, const dnnl_memory_desc_t *dst, int db);
/* TopK, Resize (ops_modern.c) */
idk_status_t idk_check_modern(idk_plan_t *p, const idk_op_t *op);
idk_status_t idk_lower_modern(idk_plan_t *p, const idk_op_t *op);
/* fused attention (attn.c) */
idk_status_t idk_check_attention(idk_plan_t *p, const idk_op_t *op);
idk_status_t idk_lower_attention(idk_plan_t *p, const idk_op_t *op);

#endif
