package dataset

import (
	"bytes"
	"testing"

	"idunno/kernel/onnx"
)

// exercise reads every sample of a decoded dataset and batches the first few, so the fuzzers
// reach Sample and Batch with whatever shapes a header can declare.
func exercise(t *testing.T, ds Dataset) {
	n := ds.Len()
	if n > 64 {
		n = 64
	}
	for i := 0; i < n; i++ {
		im, err := ds.Sample(i)
		if err != nil {
			t.Fatalf("sample %d of a dataset that opened: %v", i, err)
		}
		if im.Len() != len(im.U8)+len(im.F32) {
			t.Fatalf("sample %d: %dx%dx%d but %d values", i, im.H, im.W, im.C, len(im.U8)+len(im.F32))
		}
	}
	if n > 0 {
		im, _ := ds.Sample(0)
		if im.Len() <= 1<<16 {
			Batch(ds, 0, n, Preprocess{Resize: [2]int{3, 5}, GreyToRGB: true, Scale: 0.5}, []int64{-1, -1, -1, -1})
			Batch(ds, 0, n, Preprocess{}, []int64{-1, 1, 28, 28})
		}
	}
}

// sameAsBytes checks that OpenBytes agrees with the streaming reader on the same file. Call it
// only where OpenBytes picks the streaming reader's format: OpenBytes detects the format,
// so an IDX file is a dataset to it and "not a .npy file" to OpenNPY.
func sameAsBytes(t *testing.T, b []byte, ds Dataset, err error) {
	ds2, err2 := OpenBytes(b)
	if (err == nil) != (err2 == nil) {
		t.Fatalf("stream: %v, bytes: %v", err, err2)
	}
	if err != nil {
		return
	}
	if ds.Len() != ds2.Len() {
		t.Fatalf("stream: %d samples, bytes: %d", ds.Len(), ds2.Len())
	}
	if ds.Len() > 0 {
		a, _ := ds.Sample(ds.Len() - 1)
		c, _ := ds2.Sample(ds.Len() - 1)
		if a.H != c.H || a.W != c.W || a.C != c.C || !bytes.Equal(a.U8, c.U8) || !equalF32(a.F32, c.F32) {
			t.Fatal("stream and bytes give different samples")
		}
	}
}

func FuzzIDX(f *testing.F) {
	f.Add(idxFile(0x08, []uint32{2, 2, 3}, make([]byte, 12)))
	f.Add(idxFile(0x08, []uint32{1, 2, 2, 3}, make([]byte, 12)))
	f.Add(idxFile(0x0D, []uint32{1, 1, 2}, make([]byte, 8)))
	f.Add(idxFile(0x0B, []uint32{1, 4}, make([]byte, 8)))
	f.Add(idxFile(0x08, []uint32{3}, make([]byte, 3)))
	f.Add(idxFile(0x08, []uint32{0xffffffff, 28, 28}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := OpenIDX(bytes.NewReader(b))
		if err == nil {
			exercise(t, ds)
		}
		if len(b) >= 4 && b[0] == 0 && b[1] == 0 { // what OpenBytes reads as IDX
			sameAsBytes(t, b, ds, err)
		}
		ReadIDXLabels(bytes.NewReader(b))
	})
}

func FuzzNPY(f *testing.F) {
	for _, c := range []struct {
		shape []int
		data  any
	}{
		{[]int{2, 2, 3}, make([]uint8, 12)},
		{[]int{1, 3, 2, 5}, make([]float32, 30)},
		{[]int{1, 2, 5, 3}, make([]float64, 30)},
		{[]int{2, 4}, make([]uint8, 8)},
	} {
		var buf bytes.Buffer
		WriteNPY(&buf, c.shape, c.data)
		f.Add(buf.Bytes())
	}
	f.Add(npyWithHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 2), }", make([]byte, 16)))
	f.Add(npyWithHeader("{'descr': '>f8', 'fortran_order': False, 'shape': (1L, 1L, 1L), }", make([]byte, 8)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := OpenNPY(bytes.NewReader(b))
		if err == nil {
			exercise(t, ds)
		}
		if bytes.HasPrefix(b, npyMagic) { // what OpenBytes reads as .npy
			sameAsBytes(t, b, ds, err)
		}
	})
}

// FuzzArray feeds ReadArray (named model inputs: token ids, masks) arbitrary bytes: it must
// return an error or an array whose rows all slice.
func FuzzArray(f *testing.F) {
	f.Add(npyWithHeader("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", make([]byte, 48)))
	f.Add(npyWithHeader("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", make([]byte, 4)))
	f.Add(npyWithHeader("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 2), }", make([]byte, 16)))
	f.Add(npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }", make([]byte, 8)))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ReadArray(b)
		if err != nil {
			return
		}
		dt := onnx.Int64
		if a.DType == onnx.Float {
			dt = onnx.Float
		}
		x, err := a.Rows(0, a.Len(), dt)
		if err != nil {
			t.Fatalf("all rows of an array that read: %v", err)
		}
		if int64(len(x.I64)+len(x.F32)) != volume(a.Dims) {
			t.Fatalf("dims %v but %d values", a.Dims, len(x.I64)+len(x.F32))
		}
	})
}

func volume(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}
