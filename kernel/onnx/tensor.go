package onnx

import (
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// ElemSize is the size in bytes of one element of t in raw_data, or 0 for String and
// unknown types.
func ElemSize(t DataType) int {
	switch t {
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16, Float16, BFloat16:
		return 2
	case Float, Int32, Uint32:
		return 4
	case Int64, Uint64, Double, Complex64:
		return 8
	case Complex128:
		return 16
	}
	return 0
}

func (t DataType) String() string {
	names := map[DataType]string{
		Undefined: "undefined", Float: "float32", Uint8: "uint8", Int8: "int8", Uint16: "uint16",
		Int16: "int16", Int32: "int32", Int64: "int64", String: "string", Bool: "bool",
		Float16: "float16", Double: "float64", Uint32: "uint32", Uint64: "uint64",
		Complex64: "complex64", Complex128: "complex128", BFloat16: "bfloat16",
	}
	if s, ok := names[t]; ok {
		return s
	}
	return fmt.Sprintf("dtype(%d)", int32(t))
}

// NumElements returns the product of dims (1 for a scalar), or an error when a dimension
// is negative or the product exceeds MaxElements.
func NumElements(dims []int64) (int64, error) {
	if len(dims) > MaxRank {
		return 0, fmt.Errorf("rank %d over the limit of %d", len(dims), MaxRank)
	}
	n := int64(1)
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in %v", d, dims)
		}
		if d > MaxDim {
			return 0, fmt.Errorf("dimension %d in %v over the limit of %d", d, dims, int64(MaxDim))
		}
		if d != 0 && n > MaxElements/d {
			return 0, fmt.Errorf("shape %v has more than %d elements", dims, int64(MaxElements))
		}
		n *= d
	}
	return n, nil
}

// Len returns the number of elements t holds.
func (t *Tensor) Len() int {
	switch {
	case t.F32 != nil:
		return len(t.F32)
	case t.I64 != nil:
		return len(t.I64)
	case t.F64 != nil:
		return len(t.F64)
	case t.Strings != nil:
		return len(t.Strings)
	case t.Raw != nil && ElemSize(t.DType) > 0:
		return len(t.Raw) / ElemSize(t.DType)
	}
	return 0
}

// Floats returns t's elements converted to float64 where the type is numeric and held in
// F32, I64 or F64 (nil otherwise). Tests and tools use it to compare outputs.
func (t *Tensor) Floats() []float64 {
	var out []float64
	switch {
	case t.F32 != nil:
		out = make([]float64, len(t.F32))
		for i, v := range t.F32 {
			out[i] = float64(v)
		}
	case t.I64 != nil:
		out = make([]float64, len(t.I64))
		for i, v := range t.I64 {
			out[i] = float64(v)
		}
	case t.F64 != nil:
		out = append([]float64(nil), t.F64...)
	}
	return out
}

// TensorProto field numbers.
const (
	tensorDims         = 1
	tensorDataType     = 2
	tensorSegment      = 3
	tensorFloatData    = 4
	tensorInt32Data    = 5
	tensorStringData   = 6
	tensorInt64Data    = 7
	tensorName         = 8
	tensorRawData      = 9
	tensorDoubleData   = 10
	tensorUint64Data   = 11
	tensorExternalData = 13
	tensorDataLocation = 14
)

// tensorFields gathers a TensorProto's fields before they are checked against each other.
type tensorFields struct {
	t         Tensor
	raw       []byte
	hasRaw    bool
	floats    []uint32
	int32s    []int64
	int64s    []int64
	doubles   []uint64
	uint64s   []int64
	strings   []string
	hasTyped  bool
	external  bool
	extEntrs  [][2]string
	hasSegmnt bool
}

func decodeTensor(b []byte) (*Tensor, error) {
	var tf tensorFields
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case tensorDims:
			tf.t.Dims, err = f.varints("dims", tf.t.Dims)
			if err == nil && len(tf.t.Dims) > MaxRank {
				err = fmt.Errorf("rank over the limit of %d", MaxRank)
			}
		case tensorDataType:
			err = f.wantVarint("data_type")
			tf.t.DType = DataType(int32(f.x))
		case tensorSegment:
			tf.hasSegmnt = true
		case tensorFloatData:
			tf.floats, err = f.fixed32s("float_data", tf.floats)
			tf.hasTyped = true
		case tensorInt32Data:
			tf.int32s, err = f.varints("int32_data", tf.int32s)
			tf.hasTyped = true
		case tensorStringData:
			err = f.wantBytes("string_data")
			tf.strings = append(tf.strings, string(f.v))
			tf.hasTyped = true
		case tensorInt64Data:
			tf.int64s, err = f.varints("int64_data", tf.int64s)
			tf.hasTyped = true
		case tensorName:
			err = f.wantBytes("name")
			tf.t.Name = string(f.v)
		case tensorRawData:
			err = f.wantBytes("raw_data")
			tf.raw, tf.hasRaw = f.v, true
		case tensorDoubleData:
			tf.doubles, err = f.fixed64s("double_data", tf.doubles)
			tf.hasTyped = true
		case tensorUint64Data:
			tf.uint64s, err = f.varints("uint64_data", tf.uint64s)
			tf.hasTyped = true
		case tensorExternalData:
			tf.external = true
			if err = f.wantBytes("external_data"); err == nil {
				var k, v string
				k, v, err = decodeExternalEntry(f.v)
				tf.extEntrs = append(tf.extEntrs, [2]string{k, v})
				if len(tf.extEntrs) > MaxExternalEntries {
					err = fmt.Errorf("external data has over %d entries", MaxExternalEntries)
				}
			}
		case tensorDataLocation:
			err = f.wantVarint("data_location")
			if f.x == 1 {
				tf.external = true
			}
		}
		return err
	})
	if err == nil {
		err = tf.finish()
	}
	if err != nil {
		if tf.t.Name != "" {
			return nil, fmt.Errorf("tensor %q: %w", tf.t.Name, err)
		}
		return nil, fmt.Errorf("tensor: %w", err)
	}
	return &tf.t, nil
}

// finish checks the gathered fields against the declared type and shape and fills t.
func (tf *tensorFields) finish() error {
	t := &tf.t
	if tf.hasSegmnt {
		return fmt.Errorf("segmented tensors are not supported")
	}
	n64, err := NumElements(t.Dims)
	if err != nil {
		return err
	}
	if tf.external {
		if tf.hasRaw || tf.hasTyped {
			return fmt.Errorf("has both external data and data inside the file")
		}
		ref, err := parseExternal(tf.extEntrs)
		if err != nil {
			return err
		}
		t.ext = ref // read by ReadFile (external.go)
		return nil
	}
	n := int(n64)
	if tf.hasRaw && tf.hasTyped {
		return fmt.Errorf("has both raw_data and typed data")
	}
	if tf.hasRaw {
		return tf.fromRaw(n)
	}
	count := func(got int) error {
		if got != n {
			return fmt.Errorf("shape %v needs %d elements, data holds %d", t.Dims, n, got)
		}
		return nil
	}
	switch t.DType {
	case Float:
		if err := count(len(tf.floats)); err != nil {
			return err
		}
		t.F32 = make([]float32, n)
		for i, u := range tf.floats {
			t.F32[i] = f32frombits(u)
		}
	case Double:
		if err := count(len(tf.doubles)); err != nil {
			return err
		}
		t.F64 = make([]float64, n)
		for i, u := range tf.doubles {
			t.F64[i] = math.Float64frombits(u)
		}
	case Int64:
		if err := count(len(tf.int64s)); err != nil {
			return err
		}
		t.I64 = make([]int64, n)
		copy(t.I64, tf.int64s)
	case Int32, Int16, Int8, Uint8, Bool:
		if err := count(len(tf.int32s)); err != nil {
			return err
		}
		t.I64 = make([]int64, n)
		for i, v := range tf.int32s {
			t.I64[i] = narrowInt(t.DType, v)
		}
	case Uint16, Float16, BFloat16:
		if err := count(len(tf.int32s)); err != nil {
			return err
		}
		t.Raw = make([]byte, 2*n)
		for i, v := range tf.int32s {
			t.Raw[2*i], t.Raw[2*i+1] = byte(v), byte(v>>8)
		}
	case Uint32, Uint64:
		if err := count(len(tf.uint64s)); err != nil {
			return err
		}
		sz := ElemSize(t.DType)
		t.Raw = make([]byte, sz*n)
		for i, v := range tf.uint64s {
			for k := 0; k < sz; k++ {
				t.Raw[sz*i+k] = byte(uint64(v) >> (8 * k))
			}
		}
	case Complex64:
		if err := count(len(tf.floats) / 2); err != nil || len(tf.floats)%2 != 0 {
			return fmt.Errorf("complex64 shape %v needs %d float pairs, data holds %d floats", t.Dims, n, len(tf.floats))
		}
		t.Raw = make([]byte, 8*n)
		for i, u := range tf.floats {
			put32(t.Raw[4*i:], u)
		}
	case Complex128:
		if err := count(len(tf.doubles) / 2); err != nil || len(tf.doubles)%2 != 0 {
			return fmt.Errorf("complex128 shape %v needs %d double pairs, data holds %d doubles", t.Dims, n, len(tf.doubles))
		}
		t.Raw = make([]byte, 16*n)
		for i, u := range tf.doubles {
			put32(t.Raw[8*i:], uint32(u))
			put32(t.Raw[8*i+4:], uint32(u>>32))
		}
	case String:
		if err := count(len(tf.strings)); err != nil {
			return err
		}
		t.Strings = make([]string, n)
		copy(t.Strings, tf.strings)
	default:
		return fmt.Errorf("unsupported data type %v", t.DType)
	}
	return nil
}

// fromRaw fills t from little-endian raw_data holding n elements.
func (tf *tensorFields) fromRaw(n int) error {
	t, raw := &tf.t, tf.raw
	sz := ElemSize(t.DType)
	if sz == 0 {
		return fmt.Errorf("raw_data for data type %v is not supported", t.DType)
	}
	if int64(len(raw)) != int64(n)*int64(sz) {
		return fmt.Errorf("shape %v of %v needs %d bytes of raw_data, got %d", t.Dims, t.DType, int64(n)*int64(sz), len(raw))
	}
	switch t.DType {
	case Float:
		t.F32 = make([]float32, n)
		for i := range t.F32 {
			t.F32[i] = f32frombits(le32(raw[4*i:]))
		}
	case Double:
		t.F64 = make([]float64, n)
		for i := range t.F64 {
			t.F64[i] = math.Float64frombits(le64(raw[8*i:]))
		}
	case Int64:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(le64(raw[8*i:]))
		}
	case Int32:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(int32(le32(raw[4*i:])))
		}
	case Int16:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(int16(uint16(raw[2*i]) | uint16(raw[2*i+1])<<8))
		}
	case Int8:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(int8(raw[i]))
		}
	case Uint8:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(raw[i])
		}
	case Bool:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			if raw[i] != 0 {
				t.I64[i] = 1
			}
		}
	default:
		t.Raw = make([]byte, len(raw))
		copy(t.Raw, raw)
	}
	return nil
}

// narrowInt converts an int32_data value to the element type's range.
func narrowInt(dt DataType, v int64) int64 {
	switch dt {
	case Int32:
		return int64(int32(v))
	case Int16:
		return int64(int16(v))
	case Int8:
		return int64(int8(v))
	case Uint8:
		return int64(uint8(v))
	case Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v
}

func f32frombits(u uint32) float32 { return math.Float32frombits(u) }

func put32(b []byte, u uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

func put64(b []byte, u uint64) {
	put32(b, uint32(u))
	put32(b[4:], uint32(u>>32))
}

// EncodeTensor serializes t as a TensorProto, numeric data as raw_data.
func EncodeTensor(t *Tensor) []byte {
	return appendTensor(make([]byte, 0, sizeTensor(t)), t)
}

// sizeTensor is the length of t's encoding, so big tensors are written in place once.
func sizeTensor(t *Tensor) int {
	n := 0
	if len(t.Dims) > 0 {
		packed := 0
		for _, d := range t.Dims {
			packed += protowire.SizeVarint(uint64(d))
		}
		n += protowire.SizeTag(tensorDims) + protowire.SizeBytes(packed)
	}
	n += protowire.SizeTag(tensorDataType) + protowire.SizeVarint(uint64(t.DType))
	if t.DType == String {
		for _, s := range t.Strings {
			n += protowire.SizeTag(tensorStringData) + protowire.SizeBytes(len(s))
		}
	}
	if t.Name != "" {
		n += protowire.SizeTag(tensorName) + protowire.SizeBytes(len(t.Name))
	}
	if t.DType != String {
		n += protowire.SizeTag(tensorRawData) + protowire.SizeBytes(rawLen(t))
	}
	return n
}

func appendTensor(b []byte, t *Tensor) []byte {
	if len(t.Dims) > 0 {
		packed := 0
		for _, d := range t.Dims {
			packed += protowire.SizeVarint(uint64(d))
		}
		b = protowire.AppendTag(b, tensorDims, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(packed))
		for _, d := range t.Dims {
			b = protowire.AppendVarint(b, uint64(d))
		}
	}
	b = protowire.AppendTag(b, tensorDataType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.DType))
	if t.DType == String {
		for _, s := range t.Strings {
			b = protowire.AppendTag(b, tensorStringData, protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
	}
	if t.Name != "" {
		b = protowire.AppendTag(b, tensorName, protowire.BytesType)
		b = protowire.AppendString(b, t.Name)
	}
	if t.DType != String {
		b = protowire.AppendTag(b, tensorRawData, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(rawLen(t)))
		b = appendRaw(b, t)
	}
	return b
}

// rawLen is the length of t's elements as raw_data.
func rawLen(t *Tensor) int {
	switch {
	case t.F32 != nil && t.DType == Float:
		return 4 * len(t.F32)
	case t.F64 != nil && t.DType == Double:
		return 8 * len(t.F64)
	case t.I64 != nil:
		return ElemSize(t.DType) * len(t.I64)
	}
	return len(t.Raw)
}

// appendRaw appends t's elements as little-endian raw_data for its DType (rawLen bytes).
func appendRaw(b []byte, t *Tensor) []byte {
	n := rawLen(t)
	b = slices.Grow(b, n)
	out := b[len(b) : len(b)+n]
	switch {
	case t.F32 != nil && t.DType == Float:
		for i, v := range t.F32 {
			put32(out[4*i:], math.Float32bits(v))
		}
	case t.F64 != nil && t.DType == Double:
		for i, v := range t.F64 {
			put64(out[8*i:], math.Float64bits(v))
		}
	case t.I64 != nil:
		sz := ElemSize(t.DType)
		for i, v := range t.I64 {
			for k := 0; k < sz; k++ {
				out[sz*i+k] = byte(uint64(v) >> (8 * k))
			}
		}
	default:
		copy(out, t.Raw)
	}
	return b[:len(b)+n]
}
