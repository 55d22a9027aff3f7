package onnx

import (
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"
)

// Limits on what the decoder accepts. Every allocation the decoder makes is bounded by
// the input's length times a small constant; these limits reject absurd declarations
// (ranks, element counts, nesting) before any work is done on them.
const (
	// MaxFileSize is the largest ONNX or TensorProto file ReadFile accepts (protobuf's own 2 GiB limit).
	MaxFileSize = 2 << 30
	// MaxRank is the largest tensor rank accepted.
	MaxRank = 32
	// MaxElements is the largest element count of one tensor (or declared shape).
	MaxElements = 1 << 32
	// MaxDim is the largest single declared dimension.
	MaxDim = 1 << 32
	// MaxGraphDepth bounds subgraph nesting (If/Loop/Scan bodies inside bodies).
	MaxGraphDepth = 16
)

// Decode parses a serialized ModelProto. It never panics on malformed input; the
// returned model is not validated (see Validate).
// A model whose tensors keep their data in other files is an error wrapping
// ErrExternalData (ReadFile reads those).
func Decode(b []byte) (*Model, error) {
	m, err := decodeModel(b)
	if err == nil {
		err = rejectExternal(m)
	}
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return m, nil
}

// ReadFile reads and decodes an ONNX model file, with the external data (weights in
// files beside it) that its tensors name, confined to the file's folder.
func ReadFile(path string) (*Model, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	m, err := decodeModel(b)
	if err == nil {
		err = resolveExternal(m, filepath.Dir(path))
	}
	if err != nil {
		return nil, fmt.Errorf("onnx: %w (file %s)", err, path)
	}
	return m, nil
}

// DecodeTensor parses a serialized TensorProto (the format of the ONNX backend test data's .pb files).
func DecodeTensor(b []byte) (*Tensor, error) {
	t, err := decodeTensor(b)
	if err == nil && t.ext != nil {
		err = fmt.Errorf("tensor %q: %w", t.Name, ErrExternalData)
	}
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return t, nil
}

// ReadTensorFile reads and decodes a TensorProto file.
func ReadTensorFile(path string) (*Tensor, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	t, err := DecodeTensor(b)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("onnx: %s is %d bytes, over the %d-byte limit", path, st.Size(), MaxFileSize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return b, nil
}

// field is one decoded protobuf field: for BytesType, v holds the bytes; otherwise x
// holds the varint or fixed value.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   []byte
	x   uint64
}

// eachField calls fn for every field of one message, in order.
func eachField(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			f.x = uint64(x)
		case protowire.Fixed64Type:
			f.x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			f.v, n = protowire.ConsumeBytes(b)
		case protowire.StartGroupType:
			_, n = protowire.ConsumeGroup(num, b)
		default:
			return fmt.Errorf("field %d: unexpected wire type %d", num, typ)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.StartGroupType {
			continue // groups are not part of ONNX; skip them
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func (f field) wantBytes(what string) error {
	if f.typ != protowire.BytesType {
		return fmt.Errorf("%s (field %d): wire type %d, want length-delimited", what, f.num, f.typ)
	}
	return nil
}

func (f field) wantVarint(what string) error {
	if f.typ != protowire.VarintType {
		return fmt.Errorf("%s (field %d): wire type %d, want varint", what, f.num, f.typ)
	}
	return nil
}

// varints appends a repeated varint field, packed or not.
func (f field) varints(what string, dst []int64) ([]int64, error) {
	switch f.typ {
	case protowire.VarintType:
		return append(dst, int64(f.x)), nil
	case protowire.BytesType:
		b := f.v
		for len(b) > 0 {
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, fmt.Errorf("%s: %w", what, protowire.ParseError(n))
			}
			dst = append(dst, int64(x))
			b = b[n:]
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%s (field %d): wire type %d, want varint", what, f.num, f.typ)
}

// fixed32s appends a repeated fixed32 field, packed or not.
func (f field) fixed32s(what string, dst []uint32) ([]uint32, error) {
	switch f.typ {
	case protowire.Fixed32Type:
		return append(dst, uint32(f.x)), nil
	case protowire.BytesType:
		if len(f.v)%4 != 0 {
			return nil, fmt.Errorf("%s: packed length %d is not a multiple of 4", what, len(f.v))
		}
		for i := 0; i < len(f.v); i += 4 {
			dst = append(dst, le32(f.v[i:]))
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%s (field %d): wire type %d, want fixed32", what, f.num, f.typ)
}

// fixed64s appends a repeated fixed64 field, packed or not.
func (f field) fixed64s(what string, dst []uint64) ([]uint64, error) {
	switch f.typ {
	case protowire.Fixed64Type:
		return append(dst, f.x), nil
	case protowire.BytesType:
		if len(f.v)%8 != 0 {
			return nil, fmt.Errorf("%s: packed length %d is not a multiple of 8", what, len(f.v))
		}
		for i := 0; i < len(f.v); i += 8 {
			dst = append(dst, le64(f.v[i:]))
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%s (field %d): wire type %d, want fixed64", what, f.num, f.typ)
}

func le32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func le64(b []byte) uint64 {
	return uint64(le32(b)) | uint64(le32(b[4:]))<<32
}

// ModelProto field numbers.
const (
	modelIRVersion    = 1
	modelProducerName = 2
	modelGraph        = 7
	modelOpsetImport  = 8
)

func decodeModel(b []byte) (*Model, error) {
	m := &Model{Opsets: map[string]int64{}}
	sawGraph := false
	err := eachField(b, func(f field) error {
		switch f.num {
		case modelIRVersion:
			if err := f.wantVarint("ir_version"); err != nil {
				return err
			}
			m.IRVersion = int64(f.x)
		case modelProducerName:
			if err := f.wantBytes("producer_name"); err != nil {
				return err
			}
			m.ProducerName = string(f.v)
		case modelGraph:
			if err := f.wantBytes("graph"); err != nil {
				return err
			}
			if sawGraph {
				return fmt.Errorf("model has more than one graph")
			}
			sawGraph = true
			g, err := decodeGraph(f.v, 0)
			if err != nil {
				return err
			}
			m.Graph = g
		case modelOpsetImport:
			if err := f.wantBytes("opset_import"); err != nil {
				return err
			}
			dom, ver, err := decodeOpset(f.v)
			if err != nil {
				return err
			}
			if dom == "ai.onnx" {
				dom = ""
			}
			if _, dup := m.Opsets[dom]; dup {
				return fmt.Errorf("opset_import lists domain %q twice", dom)
			}
			m.Opsets[dom] = ver
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if m.Graph == nil {
		return nil, fmt.Errorf("model has no graph")
	}
	m.Opset = m.Opsets[""]
	return m, nil
}

func decodeOpset(b []byte) (domain string, version int64, err error) {
	err = eachField(b, func(f field) error {
		switch f.num {
		case 1:
			if err := f.wantBytes("opset domain"); err != nil {
				return err
			}
			domain = string(f.v)
		case 2:
			if err := f.wantVarint("opset version"); err != nil {
				return err
			}
			version = int64(f.x)
		}
		return nil
	})
	return domain, version, err
}

// GraphProto field numbers.
const (
	graphNode              = 1
	graphName              = 2
	graphInitializer       = 5
	graphInput             = 11
	graphOutput            = 12
	graphSparseInitializer = 15
)

func decodeGraph(b []byte, depth int) (*Graph, error) {
	if depth >= MaxGraphDepth {
		return nil, fmt.Errorf("subgraphs nested deeper than %d", MaxGraphDepth)
	}
	g := &Graph{Initializers: map[string]*Tensor{}}
	err := eachField(b, func(f field) error {
		switch f.num {
		case graphNode:
			if err := f.wantBytes("node"); err != nil {
				return err
			}
			n, err := decodeNode(f.v, depth)
			if err != nil {
				return fmt.Errorf("node %d: %w", len(g.Nodes), err)
			}
			g.Nodes = append(g.Nodes, n)
		case graphName:
			if err := f.wantBytes("graph name"); err != nil {
				return err
			}
			g.Name = string(f.v)
		case graphInitializer:
			if err := f.wantBytes("initializer"); err != nil {
				return err
			}
			t, err := decodeTensor(f.v)
			if err != nil {
				return fmt.Errorf("initializer: %w", err)
			}
			if _, dup := g.Initializers[t.Name]; dup {
				return fmt.Errorf("initializer %q appears twice", t.Name)
			}
			g.Initializers[t.Name] = t
		case graphInput, graphOutput:
			if err := f.wantBytes("graph input/output"); err != nil {
				return err
			}
			vi, err := decodeValueInfo(f.v)
			if err != nil {
				return err
			}
			if f.num == graphInput {
				g.Inputs = append(g.Inputs, vi)
			} else {
				g.Outputs = append(g.Outputs, vi)
			}
		case graphSparseInitializer:
			return fmt.Errorf("graph %q: sparse initializers are not supported", g.Name)
		}
		return nil
	})
	if err != nil {
		if g.Name != "" {
			return nil, fmt.Errorf("graph %q: %w", g.Name, err)
		}
		return nil, err
	}
	return g, nil
}

// NodeProto field numbers.
const (
	nodeInput     = 1
	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5
	nodeDomain    = 7
)

func decodeNode(b []byte, depth int) (*Node, error) {
	n := &Node{Attrs: map[string]*Attribute{}}
	err := eachField(b, func(f field) error {
		if f.num >= nodeInput && f.num <= nodeDomain && f.num != 6 {
			if err := f.wantBytes("node field"); err != nil {
				return err
			}
		}
		switch f.num {
		case nodeInput:
			n.Inputs = append(n.Inputs, string(f.v))
		case nodeOutput:
			n.Outputs = append(n.Outputs, string(f.v))
		case nodeName:
			n.Name = string(f.v)
		case nodeOpType:
			n.OpType = string(f.v)
		case nodeDomain:
			n.Domain = string(f.v)
		case nodeAttribute:
			a, err := decodeAttribute(f.v, depth)
			if err != nil {
				return err
			}
			if _, dup := n.Attrs[a.Name]; dup {
				return fmt.Errorf("attribute %q appears twice", a.Name)
			}
			n.Attrs[a.Name] = a
		}
		return nil
	})
	if err != nil {
		if n.Name != "" || n.OpType != "" {
			return nil, fmt.Errorf("%q (%s): %w", n.Name, n.OpType, err)
		}
		return nil, err
	}
	return n, nil
}

// AttributeProto field numbers.
const (
	attrName          = 1
	attrF             = 2
	attrI             = 3
	attrS             = 4
	attrT             = 5
	attrG             = 6
	attrFloats        = 7
	attrInts          = 8
	attrStrings       = 9
	attrTensors       = 10
	attrGraphs        = 11
	attrType          = 20
	attrSparseTensor  = 22
	attrTypeProto     = 14
	attrTypeProtos    = 15
	attrSparseTensors = 23
)

func decodeAttribute(b []byte, depth int) (*Attribute, error) {
	a := &Attribute{}
	var inferred AttrType // the type implied by the fields present, for files without "type"
	var floatBits []uint32
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case attrName:
			err = f.wantBytes("attribute name")
			a.Name = string(f.v)
		case attrType:
			err = f.wantVarint("attribute type")
			a.Type = AttrType(int32(f.x))
		case attrF:
			if f.typ != protowire.Fixed32Type {
				return fmt.Errorf("attribute %q: f has wire type %d, want fixed32", a.Name, f.typ)
			}
			a.F = f32frombits(uint32(f.x))
			inferred = AttrFloat
		case attrI:
			err = f.wantVarint("attribute i")
			a.I = int64(f.x)
			inferred = AttrInt
		case attrS:
			err = f.wantBytes("attribute s")
			a.S = string(f.v)
			inferred = AttrString
		case attrT:
			if err = f.wantBytes("attribute t"); err == nil {
				a.T, err = decodeTensor(f.v)
			}
			inferred = AttrTensor
		case attrG:
			if err = f.wantBytes("attribute g"); err == nil {
				a.G, err = decodeGraph(f.v, depth+1)
			}
			inferred = AttrGraph
		case attrFloats:
			floatBits, err = f.fixed32s("attribute floats", floatBits)
			inferred = AttrFloats
		case attrInts:
			a.Ints, err = f.varints("attribute ints", a.Ints)
			inferred = AttrInts
		case attrStrings:
			err = f.wantBytes("attribute strings")
			a.Strings = append(a.Strings, string(f.v))
			inferred = AttrStrings
		case attrTensors:
			var t *Tensor
			if err = f.wantBytes("attribute tensors"); err == nil {
				t, err = decodeTensor(f.v)
				a.Tensors = append(a.Tensors, t)
			}
			inferred = AttrTensors
		case attrGraphs:
			var g *Graph
			if err = f.wantBytes("attribute graphs"); err == nil {
				g, err = decodeGraph(f.v, depth+1)
				a.Graphs = append(a.Graphs, g)
			}
			inferred = AttrGraphs
		case attrSparseTensor:
			inferred = AttrSparseTensor
		case attrSparseTensors:
			inferred = AttrSparseTensors
		case attrTypeProto:
			inferred = AttrTypeProto
		case attrTypeProtos:
			inferred = AttrTypeProtos
		}
		return err
	})
	if err != nil {
		if a.Name != "" {
			return nil, fmt.Errorf("attribute %q: %w", a.Name, err)
		}
		return nil, err
	}
	if a.Name == "" {
		return nil, fmt.Errorf("attribute without a name")
	}
	if a.Type == 0 {
		a.Type = inferred
	}
	if a.Type == 0 {
		return nil, fmt.Errorf("attribute %q has no type and no value", a.Name)
	}
	if floatBits != nil {
		a.Floats = make([]float32, len(floatBits))
		for i, u := range floatBits {
			a.Floats[i] = f32frombits(u)
		}
	}
	return a, nil
}

// decodeValueInfo parses a ValueInfoProto (name, TypeProto).
func decodeValueInfo(b []byte) (ValueInfo, error) {
	var vi ValueInfo
	err := eachField(b, func(f field) error {
		switch f.num {
		case 1:
			if err := f.wantBytes("value name"); err != nil {
				return err
			}
			vi.Name = string(f.v)
		case 2:
			if err := f.wantBytes("value type"); err != nil {
				return err
			}
			return decodeTypeProto(f.v, &vi)
		}
		return nil
	})
	if err != nil {
		return vi, fmt.Errorf("value %q: %w", vi.Name, err)
	}
	return vi, nil
}

// decodeTypeProto fills vi's type from a TypeProto; only tensor types are read.
func decodeTypeProto(b []byte, vi *ValueInfo) error {
	return eachField(b, func(f field) error {
		switch f.num {
		case 1: // tensor_type
			if err := f.wantBytes("tensor_type"); err != nil {
				return err
			}
			return decodeTensorType(f.v, vi)
		case 4, 5, 8, 9: // sequence, map, sparse tensor, optional
			vi.NotTensor = true
		}
		return nil
	})
}

func decodeTensorType(b []byte, vi *ValueInfo) error {
	return eachField(b, func(f field) error {
		switch f.num {
		case 1:
			if err := f.wantVarint("elem_type"); err != nil {
				return err
			}
			vi.DType = DataType(int32(f.x))
		case 2:
			if err := f.wantBytes("shape"); err != nil {
				return err
			}
			vi.HasShape = true
			vi.Dims, vi.DimParams = nil, nil
			return eachField(f.v, func(f field) error {
				if f.num != 1 {
					return nil
				}
				if err := f.wantBytes("dim"); err != nil {
					return err
				}
				if len(vi.Dims) >= MaxRank {
					return fmt.Errorf("shape has more than %d dimensions", MaxRank)
				}
				d, p, err := decodeDim(f.v)
				if err != nil {
					return err
				}
				vi.Dims = append(vi.Dims, d)
				vi.DimParams = append(vi.DimParams, p)
				return nil
			})
		}
		return nil
	})
}

// decodeDim returns a dimension's value, or -1 and its parameter name when symbolic.
func decodeDim(b []byte) (int64, string, error) {
	d, p := int64(-1), ""
	err := eachField(b, func(f field) error {
		switch f.num {
		case 1:
			if err := f.wantVarint("dim_value"); err != nil {
				return err
			}
			d = int64(f.x)
			if d < 0 || d > MaxDim {
				return fmt.Errorf("dimension %d out of range", d)
			}
			p = ""
		case 2:
			if err := f.wantBytes("dim_param"); err != nil {
				return err
			}
			d, p = -1, string(f.v)
		}
		return nil
	})
	return d, p, err
}
