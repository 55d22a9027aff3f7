package dataset

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteNPY writes data ([]uint8, []float32 or []float64, C order) as a version 1.0 .npy
// array of the given shape, the way numpy.save does. Tests and tools use it to make datasets.
func WriteNPY(w io.Writer, shape []int, data any) error {
	n := 1
	dims := make([]string, len(shape))
	for i, d := range shape {
		if d < 0 {
			return fmt.Errorf("dataset: npy: negative dimension %d", d)
		}
		n *= d
		dims[i] = fmt.Sprint(d)
	}
	tuple := "(" + strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	tuple += ")"
	var descr string
	var body []byte
	switch v := data.(type) {
	case []uint8:
		descr, body = "|u1", v
	case []float32:
		descr, body = "<f4", make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(body[4*i:], math.Float32bits(x))
		}
	case []float64:
		descr, body = "<f8", make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(body[8*i:], math.Float64bits(x))
		}
	default:
		return fmt.Errorf("dataset: npy: cannot write %T", data)
	}
	if lenOf(data) != n {
		return fmt.Errorf("dataset: npy: shape %v holds %d values, data has %d", shape, n, lenOf(data))
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, tuple)
	// Pad with spaces so the data starts on a 64-byte boundary; the header ends with '\n'.
	total := 10 + len(hdr) + 1
	hdr += strings.Repeat(" ", (64-total%64)%64) + "\n"
	pre := make([]byte, 10)
	copy(pre, npyMagic)
	pre[6], pre[7] = 1, 0
	binary.LittleEndian.PutUint16(pre[8:], uint16(len(hdr)))
	for _, b := range [][]byte{pre, []byte(hdr), body} {
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("dataset: npy: write: %w", err)
		}
	}
	return nil
}

func lenOf(data any) int {
	switch v := data.(type) {
	case []uint8:
		return len(v)
	case []float32:
		return len(v)
	case []float64:
		return len(v)
	}
	return 0
}
