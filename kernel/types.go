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
	dtF32 = 1
	dtI64 = 7
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
