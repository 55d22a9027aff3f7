package quantize

import (
	"fmt"
	"sort"
	"strings"

	"idunno/kernel/onnx"
	"idunno/sched/dataset"
)

// Data is the calibration data of a model: Images (optional, with its preprocessing) feeds
// the model's one float input that Arrays does not name; Arrays binds inputs by name to
// .npy arrays of one row per sample (token ids and masks, int64; float features). Every
// input must be fed, and every source must hold the same number of samples.
type Data struct {
	Images dataset.Dataset
	Pre    dataset.Preprocess
	Arrays map[string]*dataset.Array
}

// RunInputs lists m's run-time inputs (those that are not initializers), in order.
func RunInputs(m *onnx.Model) []onnx.ValueInfo {
	var ins []onnx.ValueInfo
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; !init {
			ins = append(ins, in)
		}
	}
	return ins
}

func inputNames(ins []onnx.ValueInfo) string {
	var s []string
	for _, in := range ins {
		s = append(s, in.Name)
	}
	return strings.Join(s, ", ")
}

// source is what feeds one input: the images or an array.
type source struct {
	in  onnx.ValueInfo
	arr *dataset.Array // nil: the images
}

// bind checks d against m's inputs and returns one source per input, in input order,
// and the number of samples they hold.
func (d Data) bind(m *onnx.Model) ([]source, int, error) {
	if m == nil || m.Graph == nil {
		return nil, 0, fmt.Errorf("quantize: no model graph")
	}
	ins := RunInputs(m)
	byName := map[string]onnx.ValueInfo{}
	for _, in := range ins {
		byName[in.Name] = in
	}
	names := make([]string, 0, len(d.Arrays))
	for name := range d.Arrays {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := byName[name]; !ok {
			return nil, 0, fmt.Errorf("quantize: calibration data for %q: the model has no such input (its inputs: %s)", name, inputNames(ins))
		}
	}
	var srcs []source
	var floats []string // float inputs no array names
	for _, in := range ins {
		a := d.Arrays[in.Name]
		if a == nil {
			if in.DType == onnx.Float {
				floats = append(floats, in.Name)
				srcs = append(srcs, source{in: in})
				continue
			}
			return nil, 0, fmt.Errorf("quantize: model input %q (%s, dims %v) has no calibration data: give --calibration %s=FILE.npy, an integer array of one row per sample",
				in.Name, in.DType, in.Dims, in.Name)
		}
		if (in.DType == onnx.Float) != (a.DType == onnx.Float) {
			return nil, 0, fmt.Errorf("quantize: calibration data for input %q is a %s array; the input is %s", in.Name, a.DType, in.DType)
		}
		if in.HasShape {
			fits := len(in.Dims) == len(a.Dims)
			for i := 1; fits && i < len(in.Dims); i++ {
				fits = in.Dims[i] < 0 || in.Dims[i] == a.Dims[i]
			}
			if !fits {
				return nil, 0, fmt.Errorf("quantize: calibration data for input %q has rows shaped %v; the input is %v (N first)", in.Name, a.Dims[1:], in.Dims)
			}
		}
		srcs = append(srcs, source{in: in, arr: a})
	}
	switch {
	case len(floats) == 0 && d.Images != nil:
		return nil, 0, fmt.Errorf("quantize: unnamed calibration data, but every model input (%s) is named", inputNames(ins))
	case len(floats) > 1 && d.Images != nil:
		return nil, 0, fmt.Errorf("quantize: the model has float inputs %s: name each one's data (--calibration NAME=FILE.npy)", strings.Join(floats, ", "))
	case len(floats) > 0 && d.Images == nil:
		return nil, 0, fmt.Errorf("quantize: model input %q has no calibration data", floats[0])
	}
	n, from := -1, ""
	for _, s := range srcs {
		rows, what := 0, s.in.Name
		if s.arr != nil {
			rows = s.arr.Len()
		} else {
			rows = d.Images.Len()
			if err := dataset.Check(d.Images, d.Pre, s.in.Dims); err != nil {
				return nil, 0, fmt.Errorf("quantize: calibration data does not fit input %s %v: %w", s.in.Name, s.in.Dims, err)
			}
		}
		if n >= 0 && rows != n {
			return nil, 0, fmt.Errorf("quantize: calibration data differ in samples: %d for input %q, %d for %q", n, from, rows, what)
		}
		n, from = rows, what
	}
	return srcs, n, nil
}

// Batches cuts the first samples of d into batches of at most batch samples, each a list
// of m's run-time inputs in order (what Calibrate takes). A model with a fixed batch
// dimension gets batches of exactly that size.
func Batches(m *onnx.Model, d Data, samples, batch int) ([][]*onnx.Tensor, error) {
	srcs, rows, err := d.bind(m)
	if err != nil {
		return nil, err
	}
	if samples < 1 || batch < 1 {
		return nil, fmt.Errorf("quantize: %d samples in batches of %d", samples, batch)
	}
	fixed := 0
	for _, s := range srcs {
		if len(s.in.Dims) > 0 && s.in.Dims[0] > 0 {
			fixed = int(s.in.Dims[0])
		}
	}
	if fixed > 0 {
		batch = fixed
	}
	n := min(samples, rows)
	var out [][]*onnx.Tensor
	for from := 0; from+batch <= n || (fixed == 0 && from < n); from += batch {
		to := min(from+batch, n)
		b := make([]*onnx.Tensor, len(srcs))
		for i, s := range srcs {
			var t *onnx.Tensor
			if s.arr != nil {
				t, err = s.arr.Rows(from, to, s.in.DType)
			} else {
				t, err = dataset.Batch(d.Images, from, to, d.Pre, s.in.Dims)
			}
			if err != nil {
				return nil, fmt.Errorf("quantize: calibration samples %d-%d of input %s: %w", from, to, s.in.Name, err)
			}
			t.Name = s.in.Name
			b[i] = t
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("quantize: the model has a fixed batch of %d; the calibration data has only %d samples", fixed, n)
	}
	return out, nil
}
