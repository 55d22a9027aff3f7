package kernel

import (
	"fmt"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// TestNarrowIntegerArithmeticWraps: integer arithmetic on types narrower than int64 wraps
// as ONNX (and numpy) define it, although the kernel carries every integer as int64; Cast
// to a narrow type at run time wraps too; outputs keep their declared types; and an input
// value outside its declared type is refused before the run.
func TestNarrowIntegerArithmeticWraps(t *testing.T) {
	vi := func(name string, dt onnx.DataType) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: dt, Dims: []int64{6}, DimParams: make([]string, 1), HasShape: true}
	}
	node := func(op, out string, ins ...string) *onnx.Node {
		return &onnx.Node{Name: out, OpType: op, Inputs: ins, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
	}
	cast := func(out, in string, to onnx.DataType) *onnx.Node {
		n := node("Cast", out, in)
		n.Attrs["to"] = &onnx.Attribute{Name: "to", Type: onnx.AttrInt, I: int64(to)}
		return n
	}
	u8, i8, i16, i32 := onnx.Uint8, onnx.Int8, onnx.Int16, onnx.Int32
	outs := []onnx.ValueInfo{
		vi("add_u8", u8), vi("sub_u8", u8), vi("mul_u8", u8), vi("div_i8", i8), vi("neg_i8", i8), vi("abs_i8", i8),
		vi("mul_i16", i16), vi("mul_i32", i32), vi("cumsum_i32", i32), vi("cast_i8", i8), vi("cast_u8", u8),
		vi("cast_i32", i32), vi("max_u8", u8),
	}
	m := &onnx.Model{IRVersion: 8, Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
		Name: "wrap",
		Nodes: []*onnx.Node{
			node("Add", "add_u8", "a", "b"), node("Sub", "sub_u8", "a", "b"), node("Mul", "mul_u8", "a", "b"),
			node("Div", "div_i8", "c", "minus1"), node("Neg", "neg_i8", "c"), node("Abs", "abs_i8", "c"),
			node("Mul", "mul_i16", "h", "h"), node("Mul", "mul_i32", "w", "w"), node("CumSum", "cumsum_i32", "w", "axis0"),
			cast("cast_i8", "l", i8), cast("cast_u8", "f", u8), cast("cast_i32", "l", i32),
			node("Max", "max_u8", "a", "b"),
		},
		Inputs: []onnx.ValueInfo{vi("a", u8), vi("b", u8), vi("c", i8), vi("h", i16), vi("w", i32),
			vi("l", onnx.Int64), vi("f", onnx.Float)},
		Outputs: outs,
		Initializers: map[string]*onnx.Tensor{
			"minus1": {Name: "minus1", DType: i8, Dims: []int64{}, I64: []int64{-1}},
			"axis0":  {Name: "axis0", DType: onnx.Int64, Dims: []int64{}, I64: []int64{0}},
		},
	}}
	a := []uint8{200, 255, 0, 17, 128, 3}
	b := []uint8{100, 1, 1, 16, 2, 250}
	c := []int8{-128, 127, -1, 0, 5, -7}
	h := []int16{32767, -32768, 300, 181, -182, 2}
	w := []int32{2147483647, 65536, -65536, 46341, 3, -2147483648}
	l := []int64{128, -129, 255, 1 << 40, -1, 4294967295}
	f := []float32{-1, 256, 300.7, 255.9, 0.5, -0.5}
	tensor := func(dt onnx.DataType, vals []int64) *onnx.Tensor {
		return &onnx.Tensor{DType: dt, Dims: []int64{6}, I64: vals}
	}
	widen := func(n int, at func(i int) int64) []int64 {
		r := make([]int64, n)
		for i := range r {
			r[i] = at(i)
		}
		return r
	}
	want := map[string][]int64{}
	var add, sub, mul, mx []int64
	var div, neg, abs, m16, m32, cs, ci8, cu8, ci32 []int64
	var run32 int32
	for i := 0; i < 6; i++ {
		add = append(add, int64(a[i]+b[i]))
		sub = append(sub, int64(a[i]-b[i]))
		mul = append(mul, int64(a[i]*b[i]))
		mx = append(mx, int64(max(a[i], b[i])))
		m1 := int8(-1)
		div = append(div, int64(c[i]/m1))
		neg = append(neg, int64(-c[i]))
		ab := c[i]
		if ab < 0 {
			ab = -ab
		}
		abs = append(abs, int64(ab))
		m16 = append(m16, int64(h[i]*h[i]))
		m32 = append(m32, int64(w[i]*w[i]))
		run32 += w[i]
		cs = append(cs, int64(run32))
		ci8 = append(ci8, int64(int8(l[i])))
		ci32 = append(ci32, int64(int32(l[i])))
		cu8 = append(cu8, int64(uint8(int64(f[i]))))
	}
	want["add_u8"], want["sub_u8"], want["mul_u8"], want["max_u8"] = add, sub, mul, mx
	want["div_i8"], want["neg_i8"], want["abs_i8"] = div, neg, abs
	want["mul_i16"], want["mul_i32"], want["cumsum_i32"] = m16, m32, cs
	want["cast_i8"], want["cast_u8"], want["cast_i32"] = ci8, cu8, ci32

	md, err := LoadModel(m, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	inputs := []*onnx.Tensor{
		tensor(u8, widen(6, func(i int) int64 { return int64(a[i]) })),
		tensor(u8, widen(6, func(i int) int64 { return int64(b[i]) })),
		tensor(i8, widen(6, func(i int) int64 { return int64(c[i]) })),
		tensor(i16, widen(6, func(i int) int64 { return int64(h[i]) })),
		tensor(i32, widen(6, func(i int) int64 { return int64(w[i]) })),
		tensor(onnx.Int64, l),
		{DType: onnx.Float, Dims: []int64{6}, F32: f},
	}
	got, err := md.Run(inputs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if got[i].DType != o.DType {
			t.Errorf("%s: output type %v, model declares %v", o.Name, got[i].DType, o.DType)
		}
		if fmt.Sprint(got[i].I64) != fmt.Sprint(want[o.Name]) {
			t.Errorf("%s: %v, want %v", o.Name, got[i].I64, want[o.Name])
		}
	}

	// A value outside its input's declared type is refused, naming the input.
	bad := append([]*onnx.Tensor(nil), inputs...)
	bad[0] = tensor(u8, []int64{1, 2, 256, 4, 5, 6})
	if _, err := md.Run(bad); err == nil || !strings.Contains(err.Error(), "input a") || !strings.Contains(err.Error(), "uint8") {
		t.Errorf("uint8 input holding 256: error %v", err)
	}
}
