// Package onnx reads and writes ONNX files (ModelProto, TensorProto) with a memory-safe
// hand-written protobuf decoder, and holds the graph form the compiler works on.
package onnx

// DataType is ONNX's TensorProto.DataType.
type DataType int32

// The ONNX element types IDunno knows by name.
const (
	Undefined  DataType = 0
	Float      DataType = 1
	Uint8      DataType = 2
	Int8       DataType = 3
	Uint16     DataType = 4
	Int16      DataType = 5
	Int32      DataType = 6
	Int64      DataType = 7
	String     DataType = 8
	Bool       DataType = 9
	Float16    DataType = 10
	Double     DataType = 11
	Uint32     DataType = 12
	Uint64     DataType = 13
	Complex64  DataType = 14
	Complex128 DataType = 15
	BFloat16   DataType = 16
)

// Tensor is a decoded TensorProto. Exactly one of the typed slices holds the data,
// chosen by DType: F32 for Float, I64 for Int64/Int32/Int16/Int8/Uint8/Bool (widened),
// F64 for Double, Strings for String, Raw for anything else (little-endian bytes as
// stored: Uint16, Uint32, Uint64, Float16, BFloat16, Complex64, Complex128).
// A decoded tensor's slice always has exactly NumElements(Dims) elements (Raw: bytes
// = elements x ElemSize).
type Tensor struct {
	Name    string
	DType   DataType
	Dims    []int64
	F32     []float32
	I64     []int64
	F64     []float64
	Raw     []byte
	Strings []string
	ext     *externalRef // data in another file, not yet read (external.go)
}

// AttrType is ONNX's AttributeProto.AttributeType.
type AttrType int32

// Attribute kinds.
const (
	AttrFloat   AttrType = 1
	AttrInt     AttrType = 2
	AttrString  AttrType = 3
	AttrTensor  AttrType = 4
	AttrGraph   AttrType = 5
	AttrFloats  AttrType = 6
	AttrInts    AttrType = 7
	AttrStrings AttrType = 8
	AttrTensors AttrType = 9
	AttrGraphs  AttrType = 10
	// Sparse tensors and type protos are recorded by type only; their values are skipped.
	AttrSparseTensor  AttrType = 11
	AttrSparseTensors AttrType = 12
	AttrTypeProto     AttrType = 13
	AttrTypeProtos    AttrType = 14
)

// Attribute is a decoded AttributeProto; the field that Type names holds the value.
type Attribute struct {
	Name    string
	Type    AttrType
	F       float32
	I       int64
	S       string
	T       *Tensor
	Floats  []float32
	Ints    []int64
	Strings []string
	G       *Graph // AttrGraph (If, Loop, Scan bodies)
	Tensors []*Tensor
	Graphs  []*Graph
}

// Node is one operator application.
type Node struct {
	Name    string
	OpType  string
	Domain  string
	Inputs  []string // "" marks an omitted optional input
	Outputs []string
	Attrs   map[string]*Attribute
}

// ValueInfo names a graph input or output with its element type and shape.
// A dimension of -1 is symbolic (DimParams holds its name where one was given).
// HasShape is false when the file gave no shape (rank unknown); NotTensor marks
// sequence, map, optional and sparse types, which IDunno does not run.
type ValueInfo struct {
	Name      string
	DType     DataType
	Dims      []int64
	DimParams []string // len(DimParams) == len(Dims)
	HasShape  bool
	NotTensor bool
}

// Graph is a decoded GraphProto. Nodes are in file order (validation checks topological order).
type Graph struct {
	Name         string
	Nodes        []*Node
	Inputs       []ValueInfo // may include initializer names (older exporters)
	Outputs      []ValueInfo
	Initializers map[string]*Tensor
	// Values holds the element type and exact shape of every value in the graph. It is
	// empty in a decoded file and filled by the graph compiler (kernel/graph).
	Values map[string]*ValueInfo
}

// Model is a decoded ModelProto.
type Model struct {
	IRVersion    int64
	ProducerName string
	Opset        int64            // version of the default ("" or "ai.onnx") domain
	Opsets       map[string]int64 // every opset_import, by domain ("" for the default)
	Graph        *Graph
}
