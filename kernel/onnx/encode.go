package onnx

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// Encode serializes m as a ModelProto. Initializers are written in name order; every
// field Decode reads is written, so Decode(Encode(m)) equals m.
func Encode(m *Model) []byte {
	var b []byte
	b = protowire.AppendTag(b, modelIRVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.IRVersion))
	if m.ProducerName != "" {
		b = appendString(b, modelProducerName, m.ProducerName)
	}
	if m.Graph != nil {
		ge := encodeGraph(m.Graph)
		b = slices.Grow(b, protowire.SizeTag(modelGraph)+protowire.SizeBytes(ge.size)+64)
		b = protowire.AppendTag(b, modelGraph, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(ge.size))
		b = ge.append(b)
	}
	opsets := map[string]int64{}
	for d, v := range m.Opsets {
		opsets[d] = v
	}
	if m.Opset != 0 {
		opsets[""] = m.Opset
	}
	for _, d := range sortedKeys(opsets) {
		var o []byte
		if d != "" {
			o = appendString(o, 1, d)
		}
		o = protowire.AppendTag(o, 2, protowire.VarintType)
		o = protowire.AppendVarint(o, uint64(opsets[d]))
		b = appendMessage(b, modelOpsetImport, o)
	}
	return b
}

// WriteFile encodes m and writes it to path.
func WriteFile(path string, m *Model) error {
	if err := os.WriteFile(path, Encode(m), 0o644); err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	return nil
}

// WriteTensorFile encodes t as a TensorProto and writes it to path.
func WriteTensorFile(path string, t *Tensor) error {
	if err := os.WriteFile(path, EncodeTensor(t), 0o644); err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// graphEncoding holds a graph's small parts encoded and the total size, so that the
// graph, whose initializers may be hundreds of megabytes, is written in place once.
type graphEncoding struct {
	g              *Graph
	nodes, ins, os [][]byte
	inits          []string
	size           int
}

func encodeGraph(g *Graph) *graphEncoding {
	e := &graphEncoding{g: g, inits: sortedKeys(g.Initializers)}
	add := func(num protowire.Number, msg []byte) []byte {
		e.size += protowire.SizeTag(num) + protowire.SizeBytes(len(msg))
		return msg
	}
	for _, n := range g.Nodes {
		e.nodes = append(e.nodes, add(graphNode, appendNode(nil, n)))
	}
	if g.Name != "" {
		e.size += protowire.SizeTag(graphName) + protowire.SizeBytes(len(g.Name))
	}
	for _, name := range e.inits {
		e.size += protowire.SizeTag(graphInitializer) + protowire.SizeBytes(sizeTensor(g.Initializers[name]))
	}
	for i := range g.Inputs {
		e.ins = append(e.ins, add(graphInput, appendValueInfo(nil, &g.Inputs[i])))
	}
	for i := range g.Outputs {
		e.os = append(e.os, add(graphOutput, appendValueInfo(nil, &g.Outputs[i])))
	}
	return e
}

func (e *graphEncoding) append(b []byte) []byte {
	b = slices.Grow(b, e.size)
	for _, n := range e.nodes {
		b = appendMessage(b, graphNode, n)
	}
	if e.g.Name != "" {
		b = appendString(b, graphName, e.g.Name)
	}
	for _, name := range e.inits {
		t := e.g.Initializers[name]
		b = protowire.AppendTag(b, graphInitializer, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeTensor(t)))
		b = appendTensor(b, t)
	}
	for _, vi := range e.ins {
		b = appendMessage(b, graphInput, vi)
	}
	for _, vi := range e.os {
		b = appendMessage(b, graphOutput, vi)
	}
	return b
}

func appendGraph(b []byte, g *Graph) []byte { return encodeGraph(g).append(b) }

func appendNode(b []byte, n *Node) []byte {
	for _, in := range n.Inputs {
		b = appendString(b, nodeInput, in)
	}
	for _, out := range n.Outputs {
		b = appendString(b, nodeOutput, out)
	}
	if n.Name != "" {
		b = appendString(b, nodeName, n.Name)
	}
	b = appendString(b, nodeOpType, n.OpType)
	for _, name := range sortedKeys(n.Attrs) {
		b = appendMessage(b, nodeAttribute, appendAttribute(nil, n.Attrs[name]))
	}
	if n.Domain != "" {
		b = appendString(b, nodeDomain, n.Domain)
	}
	return b
}

func appendAttribute(b []byte, a *Attribute) []byte {
	b = appendString(b, attrName, a.Name)
	b = protowire.AppendTag(b, attrType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(a.Type))
	switch a.Type {
	case AttrFloat:
		b = protowire.AppendTag(b, attrF, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.F))
	case AttrInt:
		b = protowire.AppendTag(b, attrI, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.I))
	case AttrString:
		b = appendString(b, attrS, a.S)
	case AttrTensor:
		if a.T != nil {
			b = appendMessage(b, attrT, appendTensor(nil, a.T))
		}
	case AttrGraph:
		if a.G != nil {
			b = appendMessage(b, attrG, appendGraph(nil, a.G))
		}
	case AttrFloats:
		if len(a.Floats) > 0 {
			packed := make([]byte, 0, 4*len(a.Floats))
			for _, f := range a.Floats {
				packed = protowire.AppendFixed32(packed, math.Float32bits(f))
			}
			b = appendMessage(b, attrFloats, packed)
		}
	case AttrInts:
		if len(a.Ints) > 0 {
			var packed []byte
			for _, v := range a.Ints {
				packed = protowire.AppendVarint(packed, uint64(v))
			}
			b = appendMessage(b, attrInts, packed)
		}
	case AttrStrings:
		for _, s := range a.Strings {
			b = appendString(b, attrStrings, s)
		}
	case AttrTensors:
		for _, t := range a.Tensors {
			b = appendMessage(b, attrTensors, appendTensor(nil, t))
		}
	case AttrGraphs:
		for _, g := range a.Graphs {
			b = appendMessage(b, attrGraphs, appendGraph(nil, g))
		}
	}
	return b
}

func appendValueInfo(b []byte, vi *ValueInfo) []byte {
	b = appendString(b, 1, vi.Name)
	var tp []byte
	switch {
	case vi.NotTensor:
		tp = appendMessage(tp, 4, nil) // an empty sequence_type marks "not a tensor"
	case vi.DType != Undefined || vi.HasShape:
		var tt []byte
		if vi.DType != Undefined {
			tt = protowire.AppendTag(tt, 1, protowire.VarintType)
			tt = protowire.AppendVarint(tt, uint64(vi.DType))
		}
		if vi.HasShape {
			var shape []byte
			for i, d := range vi.Dims {
				var dim []byte
				switch {
				case d >= 0:
					dim = protowire.AppendTag(dim, 1, protowire.VarintType)
					dim = protowire.AppendVarint(dim, uint64(d))
				case i < len(vi.DimParams) && vi.DimParams[i] != "":
					dim = appendString(dim, 2, vi.DimParams[i])
				}
				shape = appendMessage(shape, 1, dim)
			}
			tt = appendMessage(tt, 2, shape)
		}
		tp = appendMessage(tp, 1, tt)
	default:
		return b
	}
	return appendMessage(b, 2, tp)
}
