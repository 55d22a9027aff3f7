package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"idunno/kernel/onnx"
)

// Array is one .npy array of model inputs bound by name (token ids, masks): N rows of
// exactly the same shape, one row per query. Integer and boolean arrays become int64,
// float arrays float32.
type Array struct {
	DType onnx.DataType // onnx.Int64 or onnx.Float
	Dims  []int64       // N, then the shape of one row
	I64   []int64
	F32   []float32
}

// Len is the number of rows (queries).
func (a *Array) Len() int { return int(a.Dims[0]) }

// maxArrayElems bounds an array's elements (a corrupt header must not allocate the moon).
const maxArrayElems = 1 << 30

// ReadArray parses a .npy array of int64, int32, int8, uint8, bool, float32 or float64 in
// C order with at least one dimension (a 1-D array is N rows of one value). A
// gzip-compressed file is decompressed.
func ReadArray(b []byte) (*Array, error) {
	r, err := gunzip(strings.NewReader(string(b)))
	if err != nil {
		return nil, err
	}
	h, err := readNPYHeader(r)
	if err != nil {
		return nil, err
	}
	if h.fortran {
		return nil, errors.New("dataset: npy: Fortran-order arrays are not supported (save with numpy.ascontiguousarray)")
	}
	if len(h.shape) < 1 || len(h.shape) > 8 {
		return nil, fmt.Errorf("dataset: npy: array of rank %d; want 1 to 8 (N rows first)", len(h.shape))
	}
	var order binary.ByteOrder = binary.LittleEndian
	t := h.descr
	if t != "" && strings.ContainsRune("<>|=", rune(t[0])) {
		if t[0] == '>' {
			order = binary.BigEndian
		}
		t = t[1:]
	}
	size := map[string]int64{"i8": 8, "i4": 4, "i1": 1, "u1": 1, "b1": 1, "f4": 4, "f8": 8}[t]
	if size == 0 {
		return nil, fmt.Errorf("dataset: npy: element type %q not supported (want int64, int32, int8, uint8, bool, float32 or float64)", h.descr)
	}
	n := int64(1)
	for _, d := range h.shape {
		if d < 0 || (d > 0 && n > maxArrayElems/d) {
			return nil, fmt.Errorf("dataset: npy: shape %v too large", h.shape)
		}
		n *= d
	}
	if h.shape[0] == 0 {
		return nil, errors.New("dataset: npy: array has no rows")
	}
	body, err := readBody(r, n*size)
	if err != nil {
		return nil, fmt.Errorf("dataset: npy: %w", unprefix(err))
	}
	a := &Array{Dims: append([]int64(nil), h.shape...)}
	if len(a.Dims) == 1 {
		a.Dims = append(a.Dims, 1)
	}
	if t[0] == 'f' {
		a.DType = onnx.Float
		a.F32 = make([]float32, n)
		for i := range a.F32 {
			if size == 4 {
				a.F32[i] = math.Float32frombits(order.Uint32(body[4*i:]))
			} else {
				a.F32[i] = float32(math.Float64frombits(order.Uint64(body[8*i:])))
			}
		}
		return a, nil
	}
	a.DType = onnx.Int64
	a.I64 = make([]int64, n)
	for i := range a.I64 {
		switch t {
		case "i8":
			a.I64[i] = int64(order.Uint64(body[8*i:]))
		case "i4":
			a.I64[i] = int64(int32(order.Uint32(body[4*i:])))
		case "i1":
			a.I64[i] = int64(int8(body[i]))
		case "b1":
			if body[i] != 0 {
				a.I64[i] = 1
			}
		default:
			a.I64[i] = int64(body[i])
		}
	}
	return a, nil
}

// Rows returns rows [from, to) as a tensor of the given dtype (int64 arrays may feed any
// integer or boolean input; float arrays only float32 inputs).
func (a *Array) Rows(from, to int, dtype onnx.DataType) (*onnx.Tensor, error) {
	if from < 0 || to > a.Len() || from >= to {
		return nil, fmt.Errorf("dataset: rows [%d, %d) of an array of %d", from, to, a.Len())
	}
	row := int64(1)
	for _, d := range a.Dims[1:] {
		row *= d
	}
	dims := append([]int64{int64(to - from)}, a.Dims[1:]...)
	t := &onnx.Tensor{DType: dtype, Dims: dims}
	lo, hi := int64(from)*row, int64(to)*row
	switch {
	case dtype == onnx.Float && a.DType == onnx.Float:
		t.F32 = a.F32[lo:hi]
	case dtype != onnx.Float && a.DType == onnx.Int64:
		t.I64 = a.I64[lo:hi]
	default:
		return nil, fmt.Errorf("dataset: a %s array cannot feed a %s input", a.DType, dtype)
	}
	return t, nil
}
