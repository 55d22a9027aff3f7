package dataset

import (
	"fmt"
	"math"

	"idunno/kernel/onnx"
)

// target is the per-sample shape a model input wants; 0 means "take it from the data".
type target struct {
	c, h, w int
	flat    int // > 0 for [N,F] inputs: C*H*W must equal it
	rank    int
}

func modelTarget(dims []int64) (target, error) {
	pos := func(d int64) int {
		if d <= 0 || d > maxDim*4 {
			return 0
		}
		return int(d)
	}
	switch len(dims) {
	case 4:
		return target{c: pos(dims[1]), h: pos(dims[2]), w: pos(dims[3]), rank: 4}, nil
	case 3:
		return target{c: 1, h: pos(dims[1]), w: pos(dims[2]), rank: 3}, nil
	case 2:
		return target{flat: pos(dims[1]), rank: 2}, nil
	}
	return target{}, fmt.Errorf("dataset: model input of rank %d (dims %v) not supported: want [N,C,H,W], [N,H,W] or [N,F]", len(dims), dims)
}

// shape is the resolved per-sample output shape of a batch.
type shape struct{ c, h, w int }

// resolve decides the output shape for an image, or says which flag would make it fit.
func (t target) resolve(im Image, p Preprocess) (shape, error) {
	s := shape{c: im.C, h: im.H, w: im.W}
	if p.Resize[0] > 0 {
		s.h, s.w = p.Resize[0], p.Resize[1]
	}
	if p.GreyToRGB && im.C == 1 {
		s.c = 3
	}
	if t.h > 0 && t.w > 0 && (s.h != t.h || s.w != t.w) {
		if p.Resize[0] > 0 {
			return s, fmt.Errorf("dataset: --resize %dx%d does not fit the model input, which wants %dx%d", s.h, s.w, t.h, t.w)
		}
		return s, fmt.Errorf("dataset: images are %dx%d but the model wants %dx%d: add --resize %dx%d", s.h, s.w, t.h, t.w, t.h, t.w)
	}
	if t.h > 0 && t.w == 0 && s.h != t.h || t.w > 0 && t.h == 0 && s.w != t.w {
		return s, fmt.Errorf("dataset: images are %dx%d, which does not fit the model input's %s", s.h, s.w, t.describe())
	}
	if t.c > 0 && s.c != t.c {
		if s.c == 1 && t.c == 3 {
			return s, fmt.Errorf("dataset: images have 1 channel but the model wants 3: add --grey-to-rgb")
		}
		return s, fmt.Errorf("dataset: images have %d channels but the model wants %d", s.c, t.c)
	}
	if t.flat > 0 && s.c*s.h*s.w != t.flat {
		return s, fmt.Errorf("dataset: images have %dx%dx%d = %d values but the model wants %d features", s.c, s.h, s.w, s.c*s.h*s.w, t.flat)
	}
	if n := len(p.Mean); n > 1 && n != s.c {
		return s, fmt.Errorf("dataset: --mean has %d values for %d channels", n, s.c)
	}
	if n := len(p.Std); n > 1 && n != s.c {
		return s, fmt.Errorf("dataset: --std has %d values for %d channels", n, s.c)
	}
	return s, nil
}

func (t target) describe() string {
	switch t.rank {
	case 4:
		return fmt.Sprintf("[N,%d,%d,%d]", t.c, t.h, t.w)
	case 3:
		return fmt.Sprintf("[N,%d,%d]", t.h, t.w)
	}
	return fmt.Sprintf("[N,%d]", t.flat)
}

func (t target) dims(n int, s shape) []int64 {
	switch t.rank {
	case 4:
		return []int64{int64(n), int64(s.c), int64(s.h), int64(s.w)}
	case 3:
		return []int64{int64(n), int64(s.h), int64(s.w)}
	}
	return []int64{int64(n), int64(s.c * s.h * s.w)}
}

// Batch preprocesses samples [from, to) of ds into one float32 tensor laid out for a model
// input of dims inputDims ([N,C,H,W], [N,H,W] or [N,F]; non-positive dims are symbolic).
// The batch dimension of the result is to-from. Every sample must come out the same shape.
func Batch(ds Dataset, from, to int, p Preprocess, inputDims []int64) (*onnx.Tensor, error) {
	t, err := newBatcher(ds, from, to, p, inputDims)
	if err != nil {
		return nil, err
	}
	return t.run(nil)
}

// BatchInto is Batch writing into buf when it is large enough (it reuses buf's memory and
// returns the tensor that views it), so a worker can keep one buffer per model.
func BatchInto(buf []float32, ds Dataset, from, to int, p Preprocess, inputDims []int64) (*onnx.Tensor, error) {
	t, err := newBatcher(ds, from, to, p, inputDims)
	if err != nil {
		return nil, err
	}
	return t.run(buf)
}

// Check tells whether samples of ds fit a model input of dims inputDims under p, by
// preprocessing sample 0. Use it to validate a job before it starts.
func Check(ds Dataset, p Preprocess, inputDims []int64) error {
	if ds.Len() == 0 {
		return fmt.Errorf("dataset: the dataset is empty")
	}
	_, err := Batch(ds, 0, 1, p, inputDims)
	return err
}

type batcher struct {
	ds       Dataset
	from, to int
	p        Preprocess
	t        target
}

func newBatcher(ds Dataset, from, to int, p Preprocess, inputDims []int64) (*batcher, error) {
	if from < 0 || to > ds.Len() || from >= to {
		return nil, fmt.Errorf("dataset: batch [%d,%d) out of range for %d samples", from, to, ds.Len())
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	t, err := modelTarget(inputDims)
	if err != nil {
		return nil, err
	}
	return &batcher{ds: ds, from: from, to: to, p: p, t: t}, nil
}

func (b *batcher) run(buf []float32) (*onnx.Tensor, error) {
	n := b.to - b.from
	var (
		s    shape
		out  []float32
		work scratch
	)
	for i := b.from; i < b.to; i++ {
		var im Image
		var err error
		if d, ok := b.ds.(*dense); ok {
			im, err = d.view(i) // channels-first data stays planar: no transpose
		} else {
			im, err = b.ds.Sample(i)
		}
		if err != nil {
			return nil, err
		}
		if i == b.from {
			if s, err = b.t.resolve(im, b.p); err != nil {
				return nil, err
			}
			total := n * s.c * s.h * s.w
			if int64(total) > MaxFileBytes {
				return nil, fmt.Errorf("dataset: batch of %d values is too large", total)
			}
			if cap(buf) >= total {
				out = buf[:total]
			} else {
				out = make([]float32, total)
			}
		} else if got, err := b.t.resolve(im, b.p); err != nil {
			return nil, fmt.Errorf("dataset: sample %d: %w", i, unprefix(err))
		} else if got != s {
			return nil, fmt.Errorf("dataset: sample %d comes out %dx%dx%d, sample %d %dx%dx%d: add --resize to make them equal", i, got.c, got.h, got.w, b.from, s.c, s.h, s.w)
		}
		per := s.c * s.h * s.w
		work.sample(out[(i-b.from)*per:(i-b.from+1)*per], im, s, b.p)
	}
	return &onnx.Tensor{DType: onnx.Float, Dims: b.t.dims(n, s), F32: out}, nil
}

// scratch holds buffers reused across the samples of one batch.
type scratch struct {
	plane      []float32    // one resized source channel
	rows       []float32    // horizontally resampled rows
	lut        [256]float32 // a*v + b for every byte v, for the lutA, lutB last used
	lutOK      bool
	lutA, lutB float32
	taps       resizeTaps
}

// sample writes one preprocessed image into dst (CHW, s.c*s.h*s.w values).
func (w *scratch) sample(dst []float32, im Image, s shape, p Preprocess) {
	plane := s.h * s.w
	resize := s.h != im.H || s.w != im.W
	for sc := 0; sc < im.C; sc++ {
		// Output channels fed by source channel sc: itself, or all three for grey-to-RGB.
		outs := []int{sc}
		if im.C == 1 && s.c == 3 {
			outs = []int{0, 1, 2}
		}
		// The source channel as an image of its own: a plane of planar data, else strided.
		ch, ci := im, sc
		if im.chw {
			ch, ci = im.plane(sc), 0
		}
		if !resize {
			for _, oc := range outs {
				a, b := p.affine(oc)
				w.direct(dst[oc*plane:(oc+1)*plane], ch, ci, a, b)
			}
			continue
		}
		if cap(w.plane) < plane {
			w.plane = make([]float32, plane)
		}
		src := w.plane[:plane]
		w.resize(src, ch, ci, s.h, s.w)
		for _, oc := range outs {
			a, b := p.affine(oc)
			d := dst[oc*plane : (oc+1)*plane]
			for k, x := range src {
				d[k] = float32(a*x) + b
			}
		}
	}
}

// direct normalises channel sc of im into d without resizing.
func (w *scratch) direct(d []float32, im Image, sc int, a, b float32) {
	if im.U8 != nil {
		if !w.lutOK || w.lutA != a || w.lutB != b {
			for v := range w.lut {
				w.lut[v] = float32(a*float32(v)) + b
			}
			w.lutOK, w.lutA, w.lutB = true, a, b
		}
		lut := &w.lut
		if im.C == 1 {
			src := im.U8[:len(d)]
			for k, x := range src {
				d[k] = lut[x]
			}
			return
		}
		for k := range d {
			d[k] = lut[im.U8[k*im.C+sc]]
		}
		return
	}
	if im.C == 1 {
		src := im.F32[:len(d)]
		for k, x := range src {
			d[k] = float32(a*x) + b
		}
		return
	}
	for k := range d {
		d[k] = float32(a*im.F32[k*im.C+sc]) + b
	}
}

// resizeTaps are the bilinear source indices and weights along one axis.
type resizeTaps struct {
	x0, x1 []int
	fx     []float32
	y0, y1 []int
	fy     []float32
}

// taps computes half-pixel-centre bilinear taps for n outputs from m inputs (as PyTorch's
// interpolate with align_corners=False, no antialiasing).
func taps(i0, i1 []int, f []float32, n, m int) ([]int, []int, []float32) {
	i0, i1, f = i0[:0], i1[:0], f[:0]
	scale := float32(m) / float32(n)
	for o := 0; o < n; o++ {
		src := float32(scale*(float32(o)+0.5)) - 0.5
		if src < 0 {
			src = 0
		}
		lo := int(math.Floor(float64(src)))
		if lo > m-1 {
			lo = m - 1
		}
		hi := lo
		if lo < m-1 {
			hi = lo + 1
		}
		i0, i1, f = append(i0, lo), append(i1, hi), append(f, src-float32(lo))
	}
	return i0, i1, f
}

// resize resamples channel sc of im to h x w into dst (bilinear, separable: every source
// row is resampled horizontally once, then output rows blend two of those).
func (w *scratch) resize(dst []float32, im Image, sc, h, wd int) {
	t := &w.taps
	t.x0, t.x1, t.fx = taps(t.x0, t.x1, t.fx, wd, im.W)
	t.y0, t.y1, t.fy = taps(t.y0, t.y1, t.fy, h, im.H)
	if cap(w.rows) < im.H*wd {
		w.rows = make([]float32, im.H*wd)
	}
	rows := w.rows[:im.H*wd]
	if im.U8 != nil {
		hpass(rows, im.U8, im, sc, t)
	} else {
		hpass(rows, im.F32, im, sc, t)
	}
	for y := 0; y < h; y++ {
		r0, r1 := rows[t.y0[y]*wd:(t.y0[y]+1)*wd], rows[t.y1[y]*wd:(t.y1[y]+1)*wd]
		d, fy := dst[y*wd:(y+1)*wd], t.fy[y]
		for x := range d {
			d[x] = r0[x] + float32(fy*(r1[x]-r0[x]))
		}
	}
}

// hpass resamples every row of channel sc of src (im's values) horizontally into rows.
func hpass[T uint8 | float32](rows []float32, src []T, im Image, sc int, t *resizeTaps) {
	wd := len(t.x0)
	for y := 0; y < im.H; y++ {
		r := rows[y*wd : (y+1)*wd]
		row := src[y*im.W*im.C : (y+1)*im.W*im.C]
		for x := range r {
			a, b := float32(row[t.x0[x]*im.C+sc]), float32(row[t.x1[x]*im.C+sc])
			r[x] = a + float32(t.fx[x]*(b-a))
		}
	}
}
