package graph

import (
	"fmt"
	"math"
	"strconv"

	"idunno/kernel/onnx"
)

// maxElems caps the element count of any one tensor; it keeps absurd declared dims from
// turning into huge allocations or overflowing products.
const maxElems = int64(1) << 31

// maxFoldElems caps a constant that folding may create, and maxFoldTotal all of them
// together in one compilation: a hostile model cannot make the compiler allocate much.
const (
	maxFoldElems = int64(1) << 22
	maxFoldTotal = int64(1) << 25
)

// maxRank caps tensor rank.
const maxRank = 16

// numel returns the product of dims, or an error when a dim is negative or the product
// exceeds maxElems.
func numel(dims []int64) (int64, error) {
	if len(dims) > maxRank {
		return 0, fmt.Errorf("rank %d exceeds %d", len(dims), maxRank)
	}
	n := int64(1)
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in %v", d, dims)
		}
		if d > maxElems {
			return 0, fmt.Errorf("dimension %d in %v exceeds %d", d, dims, maxElems)
		}
		if d == 0 {
			n = 0
			continue
		}
		if n > maxElems/d {
			return 0, fmt.Errorf("dims %v have more than %d elements", dims, maxElems)
		}
		n *= d
	}
	return n, nil
}

// checkDims validates a shape: bounded rank, non-negative dims, bounded element count.
func checkDims(dims []int64) error {
	_, err := numel(dims)
	return err
}

func cloneDims(d []int64) []int64 {
	out := make([]int64, len(d))
	copy(out, d)
	return out
}

func dimsEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(axis int64, rank int) (int, error) {
	r := int64(rank)
	if axis < -r || axis >= r {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += r
	}
	return int(axis), nil
}

// broadcast returns the numpy broadcast of two shapes.
func broadcast(a, b []int64) ([]int64, error) {
	n := len(a)
	if len(b) > n {
		n = len(b)
	}
	out := make([]int64, n)
	for i := 0; i < n; i++ {
		da, db := int64(1), int64(1)
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// unidirectional reports whether b broadcasts to a without changing a.
func unidirectional(a, b []int64) bool {
	out, err := broadcast(a, b)
	return err == nil && dimsEqual(out, a)
}

// vinfo returns a complete ValueInfo with exact dims.
func vinfo(name string, t onnx.DataType, dims []int64) *onnx.ValueInfo {
	return &onnx.ValueInfo{Name: name, DType: t, Dims: cloneDims(dims), DimParams: make([]string, len(dims)), HasShape: true}
}

func fmtFloat(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) }

func isFloatType(t onnx.DataType) bool { return t == onnx.Float }

// isIntType reports the integer-like dtypes a Tensor stores widened in I64.
func isIntType(t onnx.DataType) bool {
	switch t {
	case onnx.Int64, onnx.Int32, onnx.Int16, onnx.Int8, onnx.Uint8, onnx.Bool:
		return true
	}
	return false
}

// tensorLen checks that a tensor's data matches its dims and dtype and returns its
// element count.
func tensorLen(t *onnx.Tensor) (int64, error) {
	n, err := numel(t.Dims)
	if err != nil {
		return 0, err
	}
	var have int
	switch {
	case isFloatType(t.DType):
		have = len(t.F32)
	case isIntType(t.DType):
		have = len(t.I64)
	default:
		return n, nil // unsupported dtype: rejected where it is used
	}
	if int64(have) != n {
		return 0, fmt.Errorf("tensor %q has %d elements, dims %v need %d", t.Name, have, t.Dims, n)
	}
	return n, nil
}

// finite reports whether f is neither NaN nor infinite.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func dtypeName(t onnx.DataType) string {
	switch t {
	case onnx.Float:
		return "float32"
	case onnx.Uint8:
		return "uint8"
	case onnx.Int8:
		return "int8"
	case onnx.Uint16:
		return "uint16"
	case onnx.Int16:
		return "int16"
	case onnx.Int32:
		return "int32"
	case onnx.Int64:
		return "int64"
	case onnx.String:
		return "string"
	case onnx.Bool:
		return "bool"
	case onnx.Float16:
		return "float16"
	case onnx.Double:
		return "float64"
	case onnx.Uint32:
		return "uint32"
	case onnx.Uint64:
		return "uint64"
	case onnx.BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("dtype(%d)", int32(t))
}
