// Package graph compiles a decoded ONNX model for the kernel: exact shapes, folded constants, fused post-ops.
//
// Compile takes a model and the exact dims of its run-time inputs and returns a new Graph
// in which:
//
//   - every value (graph inputs, initializers, node outputs) has exact dims and dtype in
//     g.Values; every value computed at run time is float32, an integer type or bool (the
//     kernel carries integers and booleans as int64). Run-time inputs may be any of these
//     (token ids, masks);
//   - everything computable from constants is folded into g.Initializers (Constant, Shape,
//     and any node whose inputs are all constant, for the ops this package can evaluate);
//   - Identity, Dropout and Cast to the input's own type are removed by renaming (a Cast at
//     run time to float32, an integer type or bool stays a node; other targets are an
//     error). One exception: when
//     both the input and the output of an Identity/Dropout are graph inputs or outputs
//     (e.g. a graph that is only an Identity), an Identity node is kept;
//   - a graph output may be a constant (it is then in g.Initializers) or a graph input:
//     the kernel copies such outputs;
//   - BatchNormalization after a single-consumer Conv is folded into the Conv's weights;
//   - Conv nodes may carry the attribute "idunno.post_ops" (AttrStrings), applied in order
//     to the convolution's result: "sum:<value>" (add that same-shaped tensor, always
//     first), "relu", "leaky_relu:<alpha>", "clip:<min>:<max>", "sigmoid", "tanh",
//     "elu:<alpha>", "hard_sigmoid:<alpha>:<beta>", "hard_swish", "swish:<alpha>" (x *
//     sigmoid(alpha*x): a Conv output read only by a Sigmoid and by a Mul with that
//     Sigmoid's output, PyTorch's SiLU; Conv only), "gelu_erf", "gelu_tanh" (a Gelu node).
//     MatMul may carry activations and "sum:", Gemm activations only. Numbers are printed
//     with strconv 'g' -1 (exact float32 round trip). A "sum:" operand is computed before
//     the Conv or MatMul (or is a graph input) and has exactly its output's dims; it may
//     have other readers (it may even be the node's own input), so the kernel must not
//     overwrite it;
//   - a MatMul by constant (K, N) weights may have a third input: a constant bias of N
//     values along the last dim (the Add after it, fused; a Linear layer), added before
//     its post-ops;
//   - a float Add/Sub/Mul/Div may read y where the model read Expand(y) (same output);
//   - Conv, MaxPool and AveragePool have explicit attributes: kernel_shape, strides, pads
//     (begin values then end values), dilations (Conv, MaxPool), group (Conv); auto_pad is
//     resolved into pads and removed;
//   - unused optional outputs (MaxPool Indices, Dropout mask, BatchNormalization training
//     outputs) are dropped from Node.Outputs;
//   - g.Inputs lists only the run-time inputs (in model order) and g.Outputs the model's
//     outputs, both with exact dims; nodes are in topological order.
//
// Parameters that the kernel needs as numbers (Reshape shape, Slice starts/ends/axes/steps,
// Squeeze/Unsqueeze axes, Pad pads and value, Clip min/max, Expand shape, Tile repeats,
// CumSum axis, Split sizes, Reduce* axes) must be constant; ConstantInputs lists the graph
// inputs that feed such slots, so a caller that feeds every input from files (the ONNX
// backend tests) knows which to pass as consts. Gather indices may be computed at run
// time (the kernel checks their range on every run).
//
// Reduce* axes given as an input (ReduceSum from opset 13, the others from 18) are moved
// into the axes attribute; Split's sizes are resolved into its split attribute (and its
// axis made non-negative); LayerNormalization's optional Mean and InvStdDev outputs are
// computed when used. ConstantOfShape and Range are accepted only when they fold (their
// output dims would otherwise depend on run-time values). Shape always folds, because
// every dim is exact. Folds whose result would exceed 2^22 elements (or 2^25 in all) run
// as nodes instead. The model's opset must be 7 to 21.
//
// Quantized models (quant.go): QuantizeLinear and DequantizeLinear (per tensor or per
// axis; uint8, int8, int16, and int32 for DequantizeLinear) are nodes at run time
// and fold on constants. QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger are
// rewritten before compilation into DequantizeLinear with scale 1 (exact integers in
// float32), Conv or MatMul, and QuantizeLinear (to int32 for the *Integer ops; QLinear*
// scales must be constant). A Conv reading DequantizeLinear(QuantizeLinear(x)) with one
// scale and 8-bit zero point, int8 weights with zero zero points (per output channel or
// per tensor) and a constant bias reads x directly and carries the attributes
// "idunno.qdq_w" (the int8 weights, AttrTensor), "idunno.qdq_w_scales" (one per output
// channel), "idunno.qdq_x_scale", "idunno.qdq_x_zero" and "idunno.qdq_x_signed": the kernel
// runs it as an int8 convolution. Other quantized patterns keep the exact reference path.
//
// Anything unsupported (an op, an attribute value, a dtype at run time) is an error
// "graph: node <name> (<OpType>): ...", never a silently wrong graph.
package graph
