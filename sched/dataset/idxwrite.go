package dataset

import (
	"encoding/binary"
	"fmt"
	"io"
)

// WriteIDX writes unsigned bytes as an IDX file of the given dimensions ([N,H,W] for images
// like MNIST's idx3-ubyte, [N] for labels). Tests and tools use it to make datasets.
func WriteIDX(w io.Writer, dims []int, data []uint8) error {
	if len(dims) < 1 || len(dims) > 4 {
		return fmt.Errorf("dataset: idx: %d dimensions (want 1 to 4)", len(dims))
	}
	n := 1
	hdr := []byte{0, 0, idxU8, byte(len(dims))}
	for _, d := range dims {
		if d < 0 || int64(d) > 0xffffffff {
			return fmt.Errorf("dataset: idx: dimension %d out of range", d)
		}
		n *= d
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(d))
	}
	if n != len(data) {
		return fmt.Errorf("dataset: idx: dims %v hold %d values, data has %d", dims, n, len(data))
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("dataset: idx: write: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("dataset: idx: write: %w", err)
	}
	return nil
}
