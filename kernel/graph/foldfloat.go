package graph

import (
	"fmt"
	"math"

	"idunno/kernel/onnx"
)

// Folds of float ops on constants that exporters leave in a graph: Swin V2's continuous
// position bias (a small MLP over a constant coordinate table, then Sigmoid) and its
// clamped, exponentiated logit scale ran on every batch, a dozen small ops per block.
func registerFloatFolds() {
	ops["Sigmoid"].eval = evalUnaryFloat(func(v float32) float32 { return float32(1 / (1 + math.Exp(-float64(v)))) })
	ops["Exp"].eval = evalUnaryFloat(func(v float32) float32 { return float32(math.Exp(float64(v))) })
	ops["Clip"].eval = evalClip
	ops["MatMul"].eval = evalMatMul
}

func evalClip(x *nodeCtx) ([]*onnx.Tensor, error) {
	lo, hi, err := clipBounds(x)
	if err != nil {
		return nil, err
	}
	return evalUnaryFloat(func(v float32) float32 {
		if v < lo {
			v = lo
		}
		if v > hi {
			v = hi
		}
		return v
	})(x)
}

// evalMatMul folds A (..., K) times a 2-D B (K, N), summing in float64; other forms run as
// nodes (errFoldTooBig tells the compiler so).
func evalMatMul(x *nodeCtx) ([]*onnx.Tensor, error) {
	a, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	b, err := x.evalIn(1)
	if err != nil {
		return nil, err
	}
	if a.DType != onnx.Float || b.DType != onnx.Float || len(a.Dims) < 2 || len(b.Dims) != 2 || a.Dims[len(a.Dims)-1] != b.Dims[0] {
		return nil, fmt.Errorf("%w: MatMul folds only (..., K) x (K, N)", errFoldTooBig)
	}
	k, n := b.Dims[0], b.Dims[1]
	out := append(cloneDims(a.Dims[:len(a.Dims)-1]), n)
	total, err := checkFoldSize(x, out)
	if err != nil {
		return nil, err
	}
	rows := total / max(n, 1)
	if n == 0 {
		rows = 0
	}
	if rows*k*n > 1<<26 { // more multiply-adds than a fold should take at compile time
		return nil, fmt.Errorf("%w: MatMul of %d multiply-adds", errFoldTooBig, rows*k*n)
	}
	res := &onnx.Tensor{DType: onnx.Float, Dims: out, F32: make([]float32, total)}
	for r := int64(0); r < rows; r++ {
		for j := int64(0); j < n; j++ {
			var s float64
			for p := int64(0); p < k; p++ {
				s += float64(a.F32[r*k+p]) * float64(b.F32[p*n+j])
			}
			res.F32[r*n+j] = float32(s)
		}
	}
	return []*onnx.Tensor{res}, nil
}
