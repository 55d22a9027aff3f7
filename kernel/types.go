package kernel

// Go mirrors of the C ABI's enums; each block names its typedef in
// kernel/include/idunno_kernel.h.

// idk_status_t
const (
	statusOK      = 0
	statusRuntime = 6
)

// idk_dtype_t (ONNX numbering)
const (
	dtF32  = 1
	dtI64  = 7
	dtBF16 = 16
)

// idk_op_kind_t
const (
	opConv       = 1
	opPool       = 2
	opEltwise    = 3
	opBinary     = 4
	opMatMul     = 5
	opBNorm      = 6
	opConcat     = 7
	opReshape    = 8
	opTranspose  = 9
	opSoftmax    = 10
	opLRN        = 11
	opPad        = 12
	opGather     = 13
	opSlice      = 14
	opReduceMean = 15
	opCopy       = 16
	opDropout    = 17
)

// training roles and arrays (idk_train_*)
const (
	roleParam = 1
	roleState = 2
)

// idk_pool_alg_t
const (
	poolMax        = 0
	poolAvgInclude = 1
	poolAvgExclude = 2
)

// idk_eltwise_alg_t
const (
	eltRelu        = 0
	eltClip        = 1
	eltSigmoid     = 2
	eltTanh        = 3
	eltElu         = 4
	eltHardSigmoid = 5
	eltHardSwish   = 6
	eltLinear      = 7
)

// idk_binary_alg_t
const (
	binAdd   = 0
	binSub   = 1
	binMul   = 2
	binDiv   = 3
	binPRelu = 4
)

// idk_post_kind_t
const (
	postEltwise = 0
	postSum     = 1
)

// idk_op_kind_t, continued: the ops of modern models
const (
	opCast      = 18
	opCompare   = 19
	opWhere     = 20
	opExpand    = 21
	opCumSum    = 22
	opUnary     = 23
	opLayerNorm = 24
	opReduce    = 25
	opArgMax    = 26
)

// idk_eltwise_alg_t, continued
const (
	eltSqrt     = 8
	eltExp      = 9
	eltLog      = 10
	eltGeluErf  = 11
	eltGeluTanh = 12
	eltPow      = 13
	eltSwish    = 14
	eltMish     = 15
	eltSoftplus = 16
	eltRound    = 17
)

// idk_binary_alg_t, continued
const (
	binPow  = 5
	binMax  = 6
	binMin  = 7
	binMod  = 8
	binFmod = 9
)

// idk_compare_alg_t
const (
	cmpEq  = 0
	cmpLt  = 1
	cmpGt  = 2
	cmpLe  = 3
	cmpGe  = 4
	cmpAnd = 5
	cmpOr  = 6
	cmpXor = 7
)

// idk_cast_to_t
const (
	castPlain = 0
	castBool  = 1
	castI32   = 2
	castI16   = 3
	castI8    = 4
	castU8    = 5
)

// idk_unary_alg_t
const (
	unErf   = 0
	unNot   = 1
	unNeg   = 2
	unAbs   = 3
	unFloor = 4
	unCeil  = 5
	unSign  = 6
)

// idk_reduce_alg_t
const (
	redSum       = 0
	redMax       = 1
	redMin       = 2
	redMean      = 3
	redL1        = 4
	redL2        = 5
	redSumSquare = 6
	redProd      = 7
)
