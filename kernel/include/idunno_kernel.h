/*
 * idunno_kernel.h: the C ABI of IDunno's inference kernel (libidunno_kernel.so).
 *
 * A plan is one compiled network for one exact set of input shapes (one batch
 * size). The Go side lowers an ONNX graph into tensors and ops with this API,
 * calls idk_plan_compile once (which builds every oneDNN primitive, reorders
 * weights and lays out an arena), then calls idk_plan_run as often as it likes.
 *
 * Conventions (after oneDNN's C API):
 *  - every symbol starts with idk_; handles are opaque;
 *  - every function returns idk_status_t; on failure the plan's error string
 *    (idk_plan_error) says what went wrong, and idk_status_str names the code;
 *  - create/destroy pairs: idk_plan_create / idk_plan_destroy;
 *  - ownership is stated next to every pointer parameter.
 *
 * Threads: a plan runs its primitives with the thread count given at creation.
 * oneDNN here is the OpenMP build; the kernel sets the calling thread's OpenMP
 * thread count on every call, so plans with different counts can run at once
 * from different OS threads. One plan must not run twice at the same time
 * (it owns one arena); callers serialise runs of one plan.
 *
 * Data types use ONNX's TensorProto numbering. fp32 is the compute type of the
 * numeric ops; int64 tensors may be constants or computed at run time (Gather
 * indices, token ids, masks, positions): the data movers (Gather, Slice, Pad,
 * Concat, Reshape, Transpose, Expand) and the integer ops (CAST, COMPARE, WHERE,
 * CUMSUM, UNARY, BINARY add/sub/mul/div/max/min) take them. Every integer and
 * boolean ONNX type is carried as int64 (booleans as 0/1); the caller converts at
 * the plan's edges, and wraps the result of arithmetic on a narrower type with
 * IDK_OP_CAST (to I32, I16, I8 or U8). bf16 is the compute type of a bf16 plan's convolutions and
 * matrix products (idk_plan_set_precision), never a tensor's declared type; IDK_I8 is
 * accepted for constants only (the weights of IDK_OP_QCONV and IDK_OP_QMATMUL).
 */
#ifndef IDUNNO_KERNEL_H
#define IDUNNO_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IDK_API __attribute__((visibility("default")))

/* Largest tensor rank the kernel accepts. */
#define IDK_MAX_DIMS 8

typedef enum {
    IDK_OK = 0,
    IDK_ERR_INVALID = 1,     /* bad argument: ids, dims, attributes */
    IDK_ERR_UNSUPPORTED = 2, /* valid request the kernel cannot do */
    IDK_ERR_NOMEM = 3,       /* allocation failed */
    IDK_ERR_DNNL = 4,        /* oneDNN refused (message in the plan's error) */
    IDK_ERR_STATE = 5,       /* call out of order (e.g. run before compile) */
    IDK_ERR_RUNTIME = 6,     /* bad data found while running (e.g. index out of range) */
} idk_status_t;

/* Element types (ONNX TensorProto.DataType numbering). */
typedef enum {
    IDK_F32 = 1,
    IDK_I8 = 3,   /* constant int8 weights of IDK_OP_QCONV and IDK_OP_QMATMUL */
    IDK_I64 = 7,
    IDK_BF16 = 16 /* compute type of bf16 plans (idk_plan_set_precision) */
} idk_dtype_t;

/* Operators. Attribute layouts are listed per op: "i:" the int64 attrs array
 * in order, "f:" the float attrs array in order. S is the number of spatial
 * dimensions (rank - 2). All shapes are exact and already checked by the
 * caller; the kernel re-checks what it relies on. */
typedef enum {
    /* in: x, w, [bias]. i: S, strides[S], dilations[S] (ONNX: 1 = dense),
     * pads_begin[S], pads_end[S], groups. Post-ops allowed. */
    IDK_OP_CONV = 1,
    /* in: x. i: alg (idk_pool_alg_t), S, kernel[S], strides[S], dilations[S],
     * pads_begin[S], pads_end[S] (pads_end already includes ceil_mode). */
    IDK_OP_POOL = 2,
    /* in: x. i: alg (idk_eltwise_alg_t). f: alpha, beta. */
    IDK_OP_ELTWISE = 3,
    /* in: a, b (numpy broadcasting to the output). i: alg (idk_binary_alg_t). */
    IDK_OP_BINARY = 4,
    /* in: a, b, [bias]. Same rank >= 2; batch dims broadcast. i: trans_a,
     * trans_b (swap the last two dims), [perm_a[rank], perm_b[rank], perm_y[rank]]. f: alpha.
     * bias is broadcast to the output's last two dims. Post-ops allowed (not with perms).
     * With perms (trans flags 0): the product reads Transpose(a, perm_a) and
     * Transpose(b, perm_b) and y is Transpose(product, perm_y), done through strides (a
     * Transpose feeding or fed by a MatMul costs no copy). */
    IDK_OP_MATMUL = 5,
    /* in: x, scale, bias, mean, var. f: epsilon, [momentum] (training plans: the ONNX
     * momentum of the running statistics, default 0.9). */
    IDK_OP_BNORM = 6,
    /* in: x0..xn-1. i: axis. */
    IDK_OP_CONCAT = 7,
    /* in: x. Output is a view of x with the output's dims (same count). */
    IDK_OP_RESHAPE = 8,
    /* in: x. i: perm[rank]. */
    IDK_OP_TRANSPOSE = 9,
    /* in: x. i: axis, log (0 softmax, 1 logsoftmax). */
    IDK_OP_SOFTMAX = 10,
    /* in: x. i: size. f: alpha, beta, bias. */
    IDK_OP_LRN = 11,
    /* in: x. i: pads_begin[rank], pads_end[rank] (negative crops). f: value. */
    IDK_OP_PAD = 12,
    /* in: data, indices (int64). i: axis. Out-of-range index: IDK_ERR_RUNTIME. */
    IDK_OP_GATHER = 13,
    /* in: x. i: starts[rank], steps[rank] (steps non-zero, may be negative);
     * the output dims give the counts. */
    IDK_OP_SLICE = 14,
    /* in: x. Output has x's rank with reduced dims set to 1. */
    IDK_OP_REDUCE_MEAN = 15,
    /* in: x. Output is a copy of x. */
    IDK_OP_COPY = 16,
    /* in: x. f: ratio in [0, 1). Training plans zero each element with probability ratio
     * (a mask drawn from the run's seed) and scale the rest by 1/(1-ratio); inference
     * plans copy x. */
    IDK_OP_DROPOUT = 17,
    /* in: x (f32 or i64). Output: the out tensor's dtype (f32 or i64). i: to
     * (idk_cast_to_t): PLAIN converts to the output's dtype; BOOL writes 1 where x != 0,
     * else 0; I32/I16/I8/U8 write i64 holding x wrapped to that narrow type (two's
     * complement, as ONNX's integer arithmetic and Cast do). f32 -> i64 truncates toward
     * zero (NaN and values outside int64 give INT64_MIN, as x86 does), then wraps. */
    IDK_OP_CAST = 18,
    /* in: a, b (one dtype, numpy broadcasting to the output). Output i64 0/1.
     * i: alg (idk_compare_alg_t). AND/OR/XOR treat non-zero as true. */
    IDK_OP_COMPARE = 19,
    /* in: cond (i64, non-zero = true), a, b (the output's dtype); all broadcast. */
    IDK_OP_WHERE = 20,
    /* in: x. Output: x broadcast (numpy rules) to the output's dims, same dtype. */
    IDK_OP_EXPAND = 21,
    /* in: x (f32 or i64). i: axis, exclusive, reverse. */
    IDK_OP_CUMSUM = 22,
    /* in: x. Element-wise C loops oneDNN lacks. i: alg (idk_unary_alg_t). */
    IDK_OP_UNARY = 23,
    /* in: x (f32), scale, [bias] (both f32 with the dims x has from axis on).
     * i: axis (0 <= axis < rank: normalises over dims [axis, rank)). f: epsilon.
     * out: y, [mean, [inv_std_dev]] (the statistics with x's dims from axis on set to 1). */
    IDK_OP_LAYER_NORM = 24,
    /* in: x (f32). Output has x's rank with reduced dims set to 1. i: alg (idk_reduce_alg_t). */
    IDK_OP_REDUCE = 25,
    /* in: x (f32). Output i64 with x's rank and dim `axis` set to 1.
     * i: axis, select_last_index, is_min (ArgMin). */
    IDK_OP_ARGMAX = 26,
    /* (ops_modern.c; numbered from 40 to stay clear of other additions) */
    /* in: x (f32). out: values (f32), indices (i64), both x's dims with dim axis = k,
     * sorted (largest first when largest, else smallest first; ties: lower index first).
     * i: axis, k, largest. */
    IDK_OP_TOPK = 40,
    /* in: x (f32), indices (i64, 1-D), weights (f32, 1-D, as many). Output: y (f32, same
     * rank). i: taps[rank] (1 to 4). f: extrapolation value. indices holds, per dim d in
     * order, for each output index along d, taps[d] source indices (-1 on the first tap:
     * the element takes the extrapolation value); weights the matching weights.
     * y = sum over every combination of taps of the product of the dims' weights times x
     * at the combination's indices (nearest: 1 tap, linear: 2, cubic: 4). */
    IDK_OP_RESIZE = 41,
    /* in: x (f32, rank >= 2), mask (f32, that rank, each dim 1 or x's). Output: softmax over
     * the last axis of x + mask (below -80 after the row maximum: exactly 0). */
    IDK_OP_MASKED_SOFTMAX = 42,
    /* (attn.c) in: q, kt, v, [mask] (f32, rank r = y's). Output: y. i: four permutations of r
     * (q, kt, v read through them as (…, L, d), (…, d, S), (…, S, dv), equal batch dims; y
     * written through the last, as IDK_OP_MATMUL's perm_y), f: scale. y = softmax(scale Q Kt
     * + mask) V, the softmax over the last axis (below -80 after the row maximum: exactly 0);
     * the mask (…, L, S), each dim 1 or full. */
    IDK_OP_ATTENTION = 43,
    /* ---- int8 (kernel/quant.c); numbered from 64 to stay clear of new float ops ---- */
    /* ONNX QuantizeLinear. in: x (f32), scale (f32: 1 value, or 1-D along axis), [zero_point
     * (i64, the scale's dims)]. Output i64 (8-bit values carried as int64): saturate(
     * round_half_even(x / scale) + zero_point) to [qmin, qmax]. i: axis, qmin, qmax. */
    IDK_OP_QUANTIZE = 64,
    /* ONNX DequantizeLinear. in: x (i64), scale, [zero_point] as QUANTIZE. Output f32:
     * (x - zero_point) * scale. i: axis. */
    IDK_OP_DEQUANTIZE = 65,
    /* Convolution of an 8-bit quantized input with int8 weights (oneDNN's u8/s8 x s8 kernels,
     * s32 accumulation). in: x (f32), w (constant i8, ONNX's (O, I/group, k...)), w_scales
     * (constant f32 [O]), [bias (constant f32 [O])]. The kernel quantizes x as QUANTIZE with x_scale and
     * x_zero_point (u8, or s8 when x_signed), then y = x_scale * w_scales[o] * sum((xq - zp) * w)
     * + bias[o], in f32. i: as CONV, then x_zero_point, x_signed, y_q, y_zero_point, y_signed,
     * o_q, o_zero_point, o_signed, s_q, s_zero_point, s_signed. f: x_scale, y_scale, o_scale,
     * s_scale. Post-ops allowed. With y_q (1), y is written already quantized with y's scale
     * and zero point (8 bits in the chosen layout, its declared type staying f32): then only
     * QCONV ops with that x_scale, x_zero_point and x_signed (or as their summand, s_*) may
     * read y. With o_q and s_q (both or neither; then the post-ops are a sum and at most a
     * ReLU), the value is first rounded through QUANTIZE and DEQUANTIZE with o's scale and
     * zero point, and the summand is added as DEQUANTIZE(QUANTIZE(summand)) with s's: ONNX
     * QDQ around a residual Add. */
    IDK_OP_QCONV = 66,
    /* Matrix product of an 8-bit quantized input with int8 weights (oneDNN's int8 matmul).
     * in: x (f32, rank >= 2, read as rows of its last dim K), w (constant i8 [K, N]), w_scales
     * (constant f32 [N]), [bias (constant f32 [N])]. x is quantized as in QCONV, then y[.., n] =
     * x_scale * w_scales[n] * sum_k((xq - zp) * w[k, n]) + bias[n], in f32 with x's dims but
     * N last. i: x_zero_point, x_signed. f: x_scale. Post-ops allowed. */
    IDK_OP_QMATMUL = 67
} idk_op_kind_t;

typedef enum {
    IDK_CMP_EQ = 0,
    IDK_CMP_LT = 1,
    IDK_CMP_GT = 2,
    IDK_CMP_LE = 3,
    IDK_CMP_GE = 4,
    IDK_CMP_AND = 5,
    IDK_CMP_OR = 6,
    IDK_CMP_XOR = 7
} idk_compare_alg_t;

typedef enum {
    IDK_UN_ERF = 0,   /* f32 */
    IDK_UN_NOT = 1,   /* i64: 1 where x == 0 */
    IDK_UN_NEG = 2,   /* f32 or i64 */
    IDK_UN_ABS = 3,   /* f32 or i64 */
    IDK_UN_FLOOR = 4, /* f32 */
    IDK_UN_CEIL = 5,  /* f32 */
    IDK_UN_SIGN = 6   /* f32 or i64 */
} idk_unary_alg_t;

typedef enum {
    IDK_CAST_PLAIN = 0,
    IDK_CAST_BOOL = 1,
    IDK_CAST_I32 = 2,
    IDK_CAST_I16 = 3,
    IDK_CAST_I8 = 4,
    IDK_CAST_U8 = 5
} idk_cast_to_t;

typedef enum {
    IDK_RED_SUM = 0,
    IDK_RED_MAX = 1,
    IDK_RED_MIN = 2,
    IDK_RED_MEAN = 3,
    IDK_RED_L1 = 4,         /* sum |x|; the output must reduce at least one dim of size > 1 */
    IDK_RED_L2 = 5,         /* sqrt(sum x^2); same */
    IDK_RED_SUM_SQUARE = 6, /* sum x^2; same */
    IDK_RED_PROD = 7
} idk_reduce_alg_t;

typedef enum { IDK_POOL_MAX = 0, IDK_POOL_AVG_INCLUDE_PAD = 1, IDK_POOL_AVG_EXCLUDE_PAD = 2 } idk_pool_alg_t;

typedef enum {
    IDK_ELT_RELU = 0,         /* alpha: negative slope (LeakyRelu) */
    IDK_ELT_CLIP = 1,         /* alpha: min, beta: max */
    IDK_ELT_SIGMOID = 2,
    IDK_ELT_TANH = 3,
    IDK_ELT_ELU = 4,          /* alpha */
    IDK_ELT_HARD_SIGMOID = 5, /* max(0, min(1, alpha*x + beta)) */
    IDK_ELT_HARD_SWISH = 6,
    IDK_ELT_LINEAR = 7,       /* alpha*x + beta */
    IDK_ELT_SQRT = 8,
    IDK_ELT_EXP = 9,
    IDK_ELT_LOG = 10,
    IDK_ELT_GELU_ERF = 11,
    IDK_ELT_GELU_TANH = 12,
    IDK_ELT_POW = 13,         /* alpha * x^beta */
    IDK_ELT_SWISH = 14,       /* x * sigmoid(alpha*x) */
    IDK_ELT_MISH = 15,
    IDK_ELT_SOFTPLUS = 16,    /* log(1 + exp(x)) */
    IDK_ELT_ROUND = 17        /* half to even */
} idk_eltwise_alg_t;

/* ADD..DIV, MAX, MIN, MOD and FMOD also take two i64 inputs (integer division truncates
 * toward zero; division or modulo by zero is IDK_ERR_RUNTIME). PRELU and POW are f32 only,
 * MOD is i64 only. */
typedef enum {
    IDK_BIN_ADD = 0,
    IDK_BIN_SUB = 1,
    IDK_BIN_MUL = 2,
    IDK_BIN_DIV = 3,
    IDK_BIN_PRELU = 4,
    IDK_BIN_POW = 5,
    IDK_BIN_MAX = 6,
    IDK_BIN_MIN = 7,
    IDK_BIN_MOD = 8, /* i64: the remainder takes the divisor's sign (ONNX Mod, fmod=0) */
    IDK_BIN_FMOD = 9 /* f32 or i64: the remainder takes the dividend's sign (C fmod) */
} idk_binary_alg_t;

typedef enum {
    IDK_POST_ELTWISE = 0, /* alg: idk_eltwise_alg_t RELU..LINEAR, SWISH, GELU_ERF or GELU_TANH, alpha, beta */
    IDK_POST_SUM = 1      /* tensor: added to the output (same dims) */
} idk_post_kind_t;

/* Opaque plan handle. */
typedef struct idk_plan idk_plan_t;

/* idk_status_str names a status code. The string is static; do not free. */
IDK_API const char *idk_status_str(idk_status_t s);

/* idk_plan_create makes an empty plan that will run with `threads` threads
 * (<= 0: the OpenMP default). *out receives a plan the caller owns and must
 * release with idk_plan_destroy. */
IDK_API idk_status_t idk_plan_create(idk_plan_t **out, int32_t threads);

/* idk_plan_destroy frees the plan, its primitives, constants and arena. NULL is a no-op. */
IDK_API void idk_plan_destroy(idk_plan_t *p);

/* idk_plan_set_precision sets the compute type of the plan's convolutions and matrix
 * products before any op is added: IDK_F32 (the default) or IDK_BF16. A bf16 plan keeps its
 * inputs and outputs f32 and every other op's contract; convolutions and matrix products
 * with constant weights run oneDNN's bf16 kernels on weights and activations rounded to
 * bf16 (accumulating in f32), and the ops between them work on bf16 activations where
 * oneDNN has bf16 kernels. bf16 needs a CPU with AVX512_BF16 (or AMX): elsewhere the call
 * fails with IDK_ERR_UNSUPPORTED. */
IDK_API idk_status_t idk_plan_set_precision(idk_plan_t *p, int32_t dtype);

/* idk_plan_share_weights makes p, before any tensor is added, read the constants of donor (a
 * compiled inference plan of the same precision) instead of copying its own, wherever the
 * donor's constant of the same id has the same type, dims and bytes, and each reordered
 * copy wherever the donor holds that constant in the layout p asks for; everything else p
 * copies as usual. Constants are never written after compile, so both plans may run at
 * once. The donor's memory lives until it and every plan sharing it are destroyed (destroy
 * them in any order). */
IDK_API idk_status_t idk_plan_share_weights(idk_plan_t *p, idk_plan_t *donor);

/* idk_plan_const_bytes returns the bytes of constants, plain and reordered, that p holds
 * itself (borrowed == 0) or reads from its donor (borrowed != 0). */
IDK_API int64_t idk_plan_const_bytes(const idk_plan_t *p, int32_t borrowed);

/* idk_bf16_supported reports 1 when oneDNN runs bf16 natively on this CPU (AVX512_BF16 or
 * AMX), 2 when it also has AMX tiles, else 0. */
IDK_API int32_t idk_bf16_supported(void);

/* idk_plan_error returns the last error message of the plan. The string is
 * owned by the plan and valid until the next call on it. */
IDK_API const char *idk_plan_error(const idk_plan_t *p);

/* idk_plan_add_tensor declares a tensor and writes its id to *out_id.
 * dims: ndims values (borrowed, copied). data: NULL for a value computed at run
 * time, else the constant's plain row-major contents of nbytes bytes (borrowed,
 * copied before return). */
IDK_API idk_status_t idk_plan_add_tensor(idk_plan_t *p, int32_t dtype, int32_t ndims, const int64_t *dims,
                                         const void *data, int64_t nbytes, int32_t *out_id);

/* idk_plan_add_op appends an op; ops run in the order added (a topological
 * order). in/out: tensor ids, iattrs/fattrs: attributes as listed per op kind.
 * All arrays are borrowed and copied before return. */
IDK_API idk_status_t idk_plan_add_op(idk_plan_t *p, int32_t kind, int32_t nin, const int32_t *in, int32_t nout,
                                     const int32_t *out, int32_t niattr, const int64_t *iattrs, int32_t nfattr,
                                     const float *fattrs);

/* idk_plan_add_post_op appends a post-op to the last op added (CONV, QCONV or MATMUL).
 * Post-ops run in the order added. tensor: the tensor id for IDK_POST_SUM, else ignored. */
IDK_API idk_status_t idk_plan_add_post_op(idk_plan_t *p, int32_t kind, int32_t alg, float alpha, float beta,
                                          int32_t tensor);

/* idk_plan_set_io names the plan's inputs and outputs by tensor id (arrays borrowed, copied). */
IDK_API idk_status_t idk_plan_set_io(idk_plan_t *p, int32_t nin, const int32_t *in, int32_t nout,
                                     const int32_t *out);

/* idk_plan_compile builds every primitive, reorders constant weights into the
 * layouts the primitives chose and allocates the arena. Call once, after all adds. */
IDK_API idk_status_t idk_plan_compile(idk_plan_t *p);

/* idk_plan_run executes the plan. in[i]: the i-th input in plain row-major
 * layout of its declared dims and dtype (borrowed for the call, read only; an input
 * that only oneDNN primitives read is read in place, not copied, so it must not change
 * during the call). out[i]: caller-owned buffers the size of each output, written in
 * plain row-major layout. The kernel reads no buffer after returning (it keeps an
 * input's address only to compare it with the next call's). */
IDK_API idk_status_t idk_plan_run(idk_plan_t *p, const void *const *in, void *const *out);

/* idk_plan_arena_bytes reports the bytes of the plan's activation arena (after compile). */
IDK_API int64_t idk_plan_arena_bytes(const idk_plan_t *p);

/* idk_plan_steps reports how many steps (primitives and C loops) a run executes (after
 * compile): a test's check that a layout rule took effect. */
IDK_API int32_t idk_plan_steps(const idk_plan_t *p);

/* idk_thread_release frees the calling thread's OpenMP worker pool: a plan's thread calls
 * it before it ends (IDK_POOL_RELEASE=0 leaves the pool to the thread's exit). */
IDK_API void idk_thread_release(void);

/* idk_plan_inputs_in_place reports how many inputs a run reads in the caller's buffer
 * instead of copying them (after compile; 0 with IDK_INPUT_ALIAS=0). */
IDK_API int32_t idk_plan_inputs_in_place(const idk_plan_t *p);

/* idk_plan_last_run_ns reports the nanoseconds the last idk_plan_run spent
 * inside the kernel (from entry to return), for overhead measurements. */
IDK_API int64_t idk_plan_last_run_ns(const idk_plan_t *p);

/* ---- training plans ----
 *
 * A training plan is declared like an inference plan (idk_plan_create, add_tensor, add_op;
 * no post-ops, no set_io), then: idk_train_set_role marks the float constants that are
 * trainable parameters (their constant data is the initial value) or running statistics
 * (BatchNormalization mean and variance), and idk_train_compile builds forward (training
 * mode), softmax cross-entropy and backward over the (batch, classes) logits tensor.
 *
 * The plan owns six flat float arrays, each laid out in role-call order with every tensor
 * in plain row-major layout: PARAMS and GRADS (every parameter), STATE_VALUES (every
 * running statistic), OPT1 and OPT2 (optimizer state: SGD's momentum buffer, Adam's first
 * and second moments) and BATCH_STATS (for each BatchNormalization in op order: the last
 * run's batch mean (C values) then its unbiased variance (C values)). idk_train_get and
 * idk_train_set copy them out and in (caller-owned buffers, borrowed for the call).
 *
 * idk_train_run runs one forward + loss + backward: GRADS becomes d(scale * summed loss)/dθ
 * (scale = 1/batch gives the mean loss's gradient; a shard of a larger batch passes
 * 1/global batch), *loss_sum the summed cross-entropy of the batch, *correct its count of
 * right top-1 answers. Running statistics change only in idk_train_apply_batch_stats, and
 * parameters only in idk_train_optimize, so a caller can combine several runs' gradients
 * and statistics (data parallelism) before applying them. Dropout masks are a function of
 * (seed, op, element). Results are deterministic for a given thread count. */
enum { IDK_TRAIN_PARAM = 1, IDK_TRAIN_STATE = 2 };
enum {
    IDK_TRAIN_PARAMS = 0,
    IDK_TRAIN_GRADS = 1,
    IDK_TRAIN_STATE_VALUES = 2,
    IDK_TRAIN_OPT1 = 3,
    IDK_TRAIN_OPT2 = 4,
    IDK_TRAIN_BATCH_STATS = 5
};
typedef enum { IDK_OPT_SGD = 0, IDK_OPT_ADAM = 1, IDK_OPT_ADAMW = 2 } idk_optimizer_t;
#define IDK_OPT_NESTEROV 1

/* idk_train_set_role marks float constant tid as a parameter or a running statistic.
 * Call after every add, once per tensor; the call order fixes the flat arrays' layout. */
IDK_API idk_status_t idk_train_set_role(idk_plan_t *p, int32_t tid, int32_t role);

/* idk_train_compile builds the training plan: input is the run-time image tensor (N, ...),
 * logits the (N, classes) tensor the loss reads. */
IDK_API idk_status_t idk_train_compile(idk_plan_t *p, int32_t input, int32_t logits);

/* idk_train_sizes reports the flat arrays' lengths (any pointer may be NULL). */
IDK_API idk_status_t idk_train_sizes(idk_plan_t *p, int64_t *nparams, int64_t *nstate, int64_t *nbstats);

/* idk_train_get / idk_train_set copy array `which` (IDK_TRAIN_*) of exactly n floats. */
IDK_API idk_status_t idk_train_get(idk_plan_t *p, int32_t which, float *dst, int64_t n);
IDK_API idk_status_t idk_train_set(idk_plan_t *p, int32_t which, const float *src, int64_t n);

/* idk_train_run: x is the plain input batch, labels N class indices (a label outside
 * [0, classes) is IDK_ERR_RUNTIME naming it); both borrowed for the call. */
IDK_API idk_status_t idk_train_run(idk_plan_t *p, const float *x, const int64_t *labels, float scale, uint64_t seed,
                                   double *loss_sum, int64_t *correct);

/* idk_train_apply_batch_stats updates every running statistic from batch statistics laid
 * out as BATCH_STATS (NULL: the last run's): running = running*momentum + batch*(1-momentum). */
IDK_API idk_status_t idk_train_apply_batch_stats(idk_plan_t *p, const float *bstats, int64_t n);

/* idk_train_optimize applies one optimizer step to PARAMS from GRADS, as PyTorch's SGD
 * (momentum, dampening 0, flags IDK_OPT_NESTEROV, L2 weight decay), Adam (L2 weight decay)
 * and AdamW (decoupled weight decay) define it. step counts from 1 (bias correction;
 * SGD's momentum buffer starts as the first gradient). */
IDK_API idk_status_t idk_train_optimize(idk_plan_t *p, int32_t kind, int32_t flags, double lr, double momentum,
                                        double beta1, double beta2, double eps, double weight_decay, int64_t step);

/* idk_peak_bf16_gflops measures the bf16 dot-product peak (AVX512_BF16 vdpbf16ps: two
 * multiply-adds per f32 lane, counted as 4 FLOPs) like idk_peak_gflops; 0 without AVX512_BF16. */
IDK_API double idk_peak_bf16_gflops(int32_t threads, double seconds);

/* idk_peak_gflops measures the FP32 fused multiply-add peak of this machine
 * with `threads` threads over about `seconds` seconds, in GFLOP/s. */
IDK_API double idk_peak_gflops(int32_t threads, double seconds);

/* idk_fma_run runs the FMA loop of idk_peak_gflops for `iters` rounds on `threads`
 * threads and returns the floating-point operations done (for CPU-time based peaks). */
IDK_API double idk_fma_run(int32_t threads, int64_t iters);

/* idk_int8_run runs an AVX-512 VNNI (u8 x s8 -> s32 multiply-accumulate) loop for `iters`
 * rounds on `threads` threads and returns the integer operations done (a multiply-add counts
 * two), or 0 when the CPU lacks avx512_vnni: the int8 peak, measured like the FP32 one. */
IDK_API double idk_int8_run(int32_t threads, int64_t iters);

/* idk_noop does nothing; it measures the cost of a call into the library. */
IDK_API int32_t idk_noop(int32_t x);

#ifdef __cplusplus
}
#endif

#endif /* IDUNNO_KERNEL_H */
