package serving

import (
	"fmt"
	"math"
	"strconv"

	"idunno/kernel/onnx"
)

// Every datatype of the Open Inference Protocol has an ONNX element type. Decoded tensors
// keep their wire datatype and hold their values in one onnx.Tensor field:
//
//	FP32, FP16, BF16              F32 (FP16 and BF16 values are exact in float32)
//	FP64                          F64
//	INT8-64, UINT8-32, BOOL       I64
//	UINT64                        I64 holding the uint64's bits
//	BYTES                         Strings
//
// CheckInputs then converts each input to the model's datatype where that loses nothing or
// is the usual conversion (convertTensor), so a client's FP16, UINT8 or FP64 image reaches
// an FP32 model; anything else is a 400 naming both datatypes.

var (
	dtypeByName = map[string]onnx.DataType{
		"FP32": onnx.Float, "FP64": onnx.Double, "FP16": onnx.Float16, "BF16": onnx.BFloat16,
		"INT64": onnx.Int64, "INT32": onnx.Int32, "INT16": onnx.Int16, "INT8": onnx.Int8,
		"UINT64": onnx.Uint64, "UINT32": onnx.Uint32, "UINT16": onnx.Uint16, "UINT8": onnx.Uint8,
		"BOOL": onnx.Bool, "BYTES": onnx.String,
	}
	nameByDtype = func() map[onnx.DataType]string {
		m := map[onnx.DataType]string{}
		for n, t := range dtypeByName {
			m[t] = n
		}
		return m
	}()
)

// DatatypeName is the protocol's name for an ONNX element type.
func DatatypeName(t onnx.DataType) string {
	if n, ok := nameByDtype[t]; ok {
		return n
	}
	return fmt.Sprintf("TYPE%d", int(t))
}

// elemSize is the size of one element in the binary tensor extension (0: BYTES, whose
// elements carry their own 4-byte length, or an unknown type).
func elemSize(t onnx.DataType) int {
	switch t {
	case onnx.Double, onnx.Int64, onnx.Uint64:
		return 8
	case onnx.Float, onnx.Int32, onnx.Uint32:
		return 4
	case onnx.Float16, onnx.BFloat16, onnx.Int16, onnx.Uint16:
		return 2
	case onnx.Int8, onnx.Uint8, onnx.Bool:
		return 1
	}
	return 0
}

// isFloat32 reports whether values of t live in F32 (FP32, FP16, BF16).
func isFloat32(t onnx.DataType) bool {
	return t == onnx.Float || t == onnx.Float16 || t == onnx.BFloat16
}

// isInteger reports whether t is an integer datatype or BOOL (values in I64).
func isInteger(t onnx.DataType) bool {
	_, _, ok := intRange(t)
	return ok
}

// intRange is the range of an integer datatype (BOOL is 0..1); ok is false for others.
func intRange(t onnx.DataType) (lo int64, hi uint64, ok bool) {
	switch t {
	case onnx.Int8:
		return math.MinInt8, math.MaxInt8, true
	case onnx.Int16:
		return math.MinInt16, math.MaxInt16, true
	case onnx.Int32:
		return math.MinInt32, math.MaxInt32, true
	case onnx.Int64:
		return math.MinInt64, math.MaxInt64, true
	case onnx.Uint8:
		return 0, math.MaxUint8, true
	case onnx.Uint16:
		return 0, math.MaxUint16, true
	case onnx.Uint32:
		return 0, math.MaxUint32, true
	case onnx.Uint64:
		return 0, math.MaxUint64, true
	case onnx.Bool:
		return 0, 1, true
	}
	return 0, 0, false
}

// halfBits rounds f to IEEE binary16 (round to nearest even) and returns its bits.
func halfBits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f: // overflow or infinity
		return sign | 0x7c00
	case exp <= 0: // subnormal half or zero
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		h := mant >> shift
		rem, half := mant&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is still right (up to infinity)
	}
	return sign | uint16(h)
}

// halfToFloat returns the float32 value of binary16 bits (exact).
func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		v := float32(mant) / (1 << 24) // subnormal: mant x 2^-24
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// bf16Bits rounds f to bfloat16 (round to nearest even; NaN stays NaN).
func bf16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bf16ToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// roundTo rounds v to the precision of a float datatype held in F32, and reports whether a
// finite v fits its range.
func roundTo(t onnx.DataType, v float64) (float32, bool) {
	f := float32(v)
	finite := !math.IsInf(v, 0) && !math.IsNaN(v)
	if finite && math.IsInf(float64(f), 0) {
		return f, false
	}
	switch t {
	case onnx.Float16:
		f = halfToFloat(halfBits(f))
	case onnx.BFloat16:
		f = bf16ToFloat(bf16Bits(f))
	}
	if finite && math.IsInf(float64(f), 0) {
		return f, false
	}
	return f, true
}

// convertTensor returns t as datatype want: itself when it already is; a converted copy
// when every value survives (integers and FP16/BF16 into FP32/FP64, integers into wider or
// value-checked integer types, decimal text of BYTES into numbers) or the conversion is
// the usual one (FP64 rounded to FP32, as numpy's astype does); otherwise a 400.
func convertTensor(t *onnx.Tensor, want onnx.DataType) (*onnx.Tensor, error) {
	if t.DType == want {
		return t, nil
	}
	from, to := DatatypeName(t.DType), DatatypeName(want)
	refuse := func(why string) error {
		return badf("input %q: %s cannot be converted to the model's %s: %s", t.Name, from, to, why)
	}
	c := &onnx.Tensor{Name: t.Name, DType: want, Dims: t.Dims}
	n := elements(t)
	switch {
	case isFloat32(want) || want == onnx.Double:
		f := make([]float64, 0, n)
		switch {
		case isFloat32(t.DType):
			if want != onnx.Float && want != onnx.Double {
				return nil, refuse("narrowing floats is not done; send the model's datatype")
			}
			for _, v := range t.F32 {
				f = append(f, float64(v))
			}
		case t.DType == onnx.Double:
			if want != onnx.Float {
				return nil, refuse("only FP32 inputs take FP64 values (rounded to nearest)")
			}
			f = t.F64
		case t.DType == onnx.String:
			for i, s := range t.Strings {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return nil, refuse(fmt.Sprintf("element %d is not a decimal number", i))
				}
				f = append(f, v)
			}
		default: // integers, exactly or not at all
			for i, v := range t.I64 {
				x, big := float64(v), v > 1<<53 || v < -(1<<53)
				if t.DType == onnx.Uint64 {
					x, big = float64(uint64(v)), uint64(v) > 1<<53
				}
				if r, _ := roundTo(want, x); big || (want != onnx.Double && float64(r) != x) {
					return nil, refuse(fmt.Sprintf("element %d is not exact in %s", i, to))
				}
				f = append(f, x)
			}
		}
		if want == onnx.Double {
			c.F64 = append([]float64(nil), f...)
			return c, nil
		}
		c.F32 = make([]float32, len(f))
		for i, v := range f {
			r, ok := roundTo(want, v)
			if !ok {
				return nil, refuse(fmt.Sprintf("element %d (%g) is out of range", i, v))
			}
			c.F32[i] = r
		}
		return c, nil
	}
	lo, hi, ok := intRange(want)
	if !ok {
		return nil, refuse("the model's datatype is not supported")
	}
	c.I64 = make([]int64, n)
	inRange := func(i int, neg bool, u uint64) error {
		if neg && int64(u) < lo || !neg && u > hi {
			return refuse(fmt.Sprintf("element %d is out of range", i))
		}
		c.I64[i] = int64(u)
		return nil
	}
	switch {
	case t.DType == onnx.String:
		for i, s := range t.Strings {
			if want == onnx.Bool && (s == "true" || s == "false") {
				if s == "true" {
					c.I64[i] = 1
				}
				continue
			}
			if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				if err := inRange(i, false, u); err != nil {
					return nil, err
				}
				continue
			}
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, refuse(fmt.Sprintf("element %d is not a decimal integer", i))
			}
			if err := inRange(i, v < 0, uint64(v)); err != nil {
				return nil, err
			}
		}
	case isInteger(t.DType):
		for i, v := range t.I64 {
			neg := v < 0 && t.DType != onnx.Uint64
			if err := inRange(i, neg, uint64(v)); err != nil {
				return nil, err
			}
		}
	default:
		return nil, refuse("floating-point values are not converted to integers; send an integer datatype")
	}
	return c, nil
}
