package graph

import (
	"idunno/kernel/onnx"
)

// window is the resolved geometry of a convolution or pooling window.
type window struct {
	kernel, strides, dilations, pads []int64 // pads: begin values then end values
	out                              []int64 // output spatial dims
}

// ints reads an optional ints attribute of length n with values in [lo, hi], or def.
func (x *nodeCtx) boundedInts(name string, n int, def, lo, hi int64) ([]int64, error) {
	v, ok, err := x.attrInts(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		out := make([]int64, n)
		for i := range out {
			out[i] = def
		}
		return out, nil
	}
	if len(v) != n {
		return nil, x.errf("attribute %s %v; want %d values", name, v, n)
	}
	for _, e := range v {
		if e < lo || e > hi {
			return nil, x.errf("attribute %s %v: values must be in [%d, %d]", name, v, lo, hi)
		}
	}
	return append([]int64(nil), v...), nil
}

// resolveWindow computes output dims and explicit pads for spatial input dims in.
func resolveWindow(x *nodeCtx, in, kernel []int64, dilated, ceil bool) (*window, error) {
	n := len(in)
	w := &window{kernel: kernel}
	var err error
	if w.strides, err = x.boundedInts("strides", n, 1, 1, maxElems); err != nil {
		return nil, err
	}
	w.dilations = make([]int64, n)
	for i := range w.dilations {
		w.dilations[i] = 1
	}
	if dilated {
		if w.dilations, err = x.boundedInts("dilations", n, 1, 1, maxElems); err != nil {
			return nil, err
		}
	}
	autoPad, err := x.attrString("auto_pad", "NOTSET")
	if err != nil {
		return nil, err
	}
	pads, err := x.boundedInts("pads", 2*n, 0, 0, maxElems)
	if err != nil {
		return nil, err
	}
	if autoPad != "NOTSET" {
		for _, p := range pads {
			if p != 0 {
				return nil, x.errf("pads %v given with auto_pad %s", pads, autoPad)
			}
		}
	}
	w.out = make([]int64, n)
	for i := 0; i < n; i++ {
		ek := (kernel[i]-1)*w.dilations[i] + 1
		s := w.strides[i]
		switch autoPad {
		case "NOTSET":
			span := in[i] + pads[i] + pads[i+n] - ek
			if span < 0 {
				return nil, x.errf("window %d (dilated) exceeds padded input %d on spatial axis %d", ek, in[i]+pads[i]+pads[i+n], i)
			}
			o := span/s + 1
			if ceil && span%s != 0 {
				o++
				// The last window must start inside the input or the begin padding.
				if (o-1)*s >= in[i]+pads[i] {
					o--
				}
			}
			w.out[i] = o
		case "VALID":
			if in[i] < ek {
				return nil, x.errf("window %d exceeds input %d on spatial axis %d", ek, in[i], i)
			}
			w.out[i] = (in[i]-ek)/s + 1
		case "SAME_UPPER", "SAME_LOWER":
			o := (in[i] + s - 1) / s
			total := (o-1)*s + ek - in[i]
			if total < 0 {
				total = 0
			}
			small := total / 2
			if autoPad == "SAME_UPPER" {
				pads[i], pads[i+n] = small, total-small
			} else {
				pads[i], pads[i+n] = total-small, small
			}
			w.out[i] = o
		default:
			return nil, x.errf("auto_pad %q not supported", autoPad)
		}
	}
	w.pads = pads
	return w, nil
}

// writeWindow stores the resolved geometry as explicit attributes for the kernel.
func (w *window) write(x *nodeCtx, dilated bool) {
	delete(x.n.Attrs, "auto_pad")
	x.setInts("kernel_shape", append([]int64(nil), w.kernel...))
	x.setInts("strides", w.strides)
	x.setInts("pads", w.pads)
	if dilated {
		x.setInts("dilations", w.dilations)
	}
}

func inferConv(x *nodeCtx) ([]onnx.ValueInfo, error) {
	for i := 0; i < 3; i++ {
		if x.has(i) {
			if err := x.floatIn(i); err != nil {
				return nil, err
			}
		}
	}
	d, wd := x.dims(0), x.dims(1)
	if len(d) < 3 || len(wd) != len(d) {
		return nil, x.errf("input dims %v and weight dims %v: want equal ranks of at least 3", d, wd)
	}
	group, err := x.attrInt("group", 1)
	if err != nil {
		return nil, err
	}
	c, m := d[1], wd[0]
	if group < 1 || c%group != 0 || m%group != 0 || wd[1]*group != c {
		return nil, x.errf("group %d does not fit input channels %d and weight dims %v", group, c, wd)
	}
	if x.has(2) {
		if b := x.dims(2); len(b) != 1 || b[0] != m {
			return nil, x.errf("bias dims %v; want [%d]", b, m)
		}
	}
	kernel := cloneDims(wd[2:])
	for _, k := range kernel {
		if k < 1 {
			return nil, x.errf("weight dims %v have an empty kernel", wd)
		}
	}
	if ks, ok, err := x.attrInts("kernel_shape"); err != nil {
		return nil, err
	} else if ok && !dimsEqual(ks, kernel) {
		return nil, x.errf("kernel_shape %v does not match weight dims %v", ks, wd)
	}
	w, err := resolveWindow(x, d[2:], kernel, true, false)
	if err != nil {
		return nil, err
	}
	w.write(x, true)
	x.setInt("group", group)
	return one(append([]int64{d[0], m}, w.out...)), nil
}

func inferPool(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	d := x.dims(0)
	if len(d) < 3 {
		return nil, x.errf("input rank %d; want at least 3", len(d))
	}
	n := len(d) - 2
	if _, ok := x.n.Attrs["kernel_shape"]; !ok {
		return nil, x.errf("attribute kernel_shape is required")
	}
	kernel, err := x.boundedInts("kernel_shape", n, 1, 1, maxElems)
	if err != nil {
		return nil, err
	}
	isMax := x.n.OpType == "MaxPool"
	ceil, err := x.bool01("ceil_mode", 0)
	if err != nil {
		return nil, err
	}
	if isMax {
		if so, err := x.attrInt("storage_order", 0); err != nil {
			return nil, err
		} else if so != 0 {
			return nil, x.errf("storage_order=%d not supported", so)
		}
		if len(x.n.Outputs) > 1 && x.n.Outputs[1] != "" && x.c.used(x.n.Outputs[1]) {
			return nil, x.errf("output Indices is not supported")
		}
	} else if _, err := x.bool01("count_include_pad", 0); err != nil {
		return nil, err
	}
	w, err := resolveWindow(x, d[2:], kernel, isMax, ceil)
	if err != nil {
		return nil, err
	}
	w.write(x, isMax)
	return one(append([]int64{d[0], d[1]}, w.out...)), nil
}
