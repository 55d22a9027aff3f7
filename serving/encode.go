package serving

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"

	"idunno/kernel/onnx"
)

// TensorMeta describes one model input or output in the metadata response. A dimension
// of -1 is variable (the batch dimension always is).
type TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata is the body of GET /v2/models/{name}.
type ModelMetadata struct {
	Name     string       `json:"name"`
	Versions []string     `json:"versions"`
	Platform string       `json:"platform"`
	Inputs   []TensorMeta `json:"inputs"`
	Outputs  []TensorMeta `json:"outputs"`
}

// MetadataFromONNX builds protocol metadata from a loaded model's graph inputs and outputs;
// the first dimension is reported as -1 because a model runs any batch size.
func MetadataFromONNX(name string, ins, outs []onnx.ValueInfo) ModelMetadata {
	conv := func(vs []onnx.ValueInfo) []TensorMeta {
		r := make([]TensorMeta, 0, len(vs))
		for _, v := range vs {
			shape := append([]int64(nil), v.Dims...)
			if len(shape) > 0 {
				shape[0] = -1
			}
			r = append(r, TensorMeta{Name: v.Name, Datatype: DatatypeName(v.DType), Shape: shape})
		}
		return r
	}
	return ModelMetadata{Name: name, Versions: []string{"1"}, Platform: "idunno_onnx", Inputs: conv(ins), Outputs: conv(outs)}
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // cannot fail for a string
	return append(b, q...)
}

// EncodeInferResponse writes the response for outs. binary(i) says whether output i goes
// into the binary section; it returns the JSON part and the binary part (nil when empty).
func EncodeInferResponse(buf []byte, model, id string, outs []*onnx.Tensor, binaryOut func(i int) bool) (js, bin []byte) {
	b := append(buf, `{"model_name":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"model_version":"1"`...)
	if id != "" {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, id)
	}
	b = append(b, `,"outputs":[`...)
	for i, t := range outs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, t.Name)
		b = append(b, `,"datatype":"`...)
		b = append(b, DatatypeName(t.DType)...)
		b = append(b, `","shape":[`...)
		for j, d := range t.Dims {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ']')
		if binaryOut(i) {
			start := len(bin)
			bin = appendBinary(bin, t)
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(bin)-start), 10)
			b = append(b, `}}`...)
			continue
		}
		b = append(b, `,"data":[`...)
		b = appendData(b, t)
		b = append(b, `]}`...)
	}
	b = append(b, `]}`...)
	return b, bin
}

func appendData(b []byte, t *onnx.Tensor) []byte {
	switch {
	case t.F32 != nil:
		for i, v := range t.F32 {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, float64(v), 32)
		}
	case t.F64 != nil:
		for i, v := range t.F64 {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, v, 64)
		}
	case t.Strings != nil:
		for i, v := range t.Strings {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, v)
		}
	default:
		for i, v := range t.I64 {
			if i > 0 {
				b = append(b, ',')
			}
			switch t.DType {
			case onnx.Bool:
				b = strconv.AppendBool(b, v != 0)
			case onnx.Uint64:
				b = strconv.AppendUint(b, uint64(v), 10)
			default:
				b = strconv.AppendInt(b, v, 10)
			}
		}
	}
	return b
}

// appendFloat writes v as JSON; JSON has no NaN or infinity, so those become null.
func appendFloat(b []byte, v float64, bits int) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, bits)
}

// appendBinary appends t's elements little-endian, as the binary tensor extension lays them
// out (BYTES: each element's 4-byte length, then its bytes).
func appendBinary(b []byte, t *onnx.Tensor) []byte {
	le := binary.LittleEndian
	switch {
	case t.F32 != nil:
		for _, v := range t.F32 {
			switch t.DType {
			case onnx.Float16:
				b = le.AppendUint16(b, halfBits(v))
			case onnx.BFloat16:
				b = le.AppendUint16(b, bf16Bits(v))
			default:
				b = le.AppendUint32(b, math.Float32bits(v))
			}
		}
	case t.F64 != nil:
		for _, v := range t.F64 {
			b = le.AppendUint64(b, math.Float64bits(v))
		}
	case t.Strings != nil:
		for _, v := range t.Strings {
			b = le.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	case t.I64 != nil:
		for _, v := range t.I64 {
			switch elemSize(t.DType) {
			case 8:
				b = le.AppendUint64(b, uint64(v))
			case 4:
				b = le.AppendUint32(b, uint32(v))
			case 2:
				b = le.AppendUint16(b, uint16(v))
			default:
				b = append(b, byte(v))
			}
		}
	default:
		b = append(b, t.Raw...)
	}
	return b
}

// errorBody is the protocol's error response.
func errorBody(msg string) []byte {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}
