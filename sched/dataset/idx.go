package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// IDX element types (the third magic byte).
const (
	idxU8  = 0x08
	idxI8  = 0x09
	idxI16 = 0x0B
	idxI32 = 0x0C
	idxF32 = 0x0D
	idxF64 = 0x0E
)

func idxTypeSize(t byte) int64 {
	switch t {
	case idxU8, idxI8:
		return 1
	case idxI16:
		return 2
	case idxI32, idxF32:
		return 4
	case idxF64:
		return 8
	}
	return 0
}

// idxHeader reads the magic and dimensions of an IDX file.
func idxHeader(r io.Reader) (typ byte, dims []int64, err error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return 0, nil, fmt.Errorf("dataset: idx: short header: %w", err)
	}
	if magic[0] != 0 || magic[1] != 0 {
		return 0, nil, errors.New("dataset: idx: bad magic (not an IDX file)")
	}
	typ = magic[2]
	if idxTypeSize(typ) == 0 {
		return 0, nil, fmt.Errorf("dataset: idx: unknown element type 0x%02x", typ)
	}
	nd := int(magic[3])
	if nd < 1 || nd > 4 {
		return 0, nil, fmt.Errorf("dataset: idx: %d dimensions (want 1 to 4)", nd)
	}
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, raw); err != nil {
		return 0, nil, fmt.Errorf("dataset: idx: short header: %w", err)
	}
	dims = make([]int64, nd)
	for i := range dims {
		dims[i] = int64(binary.BigEndian.Uint32(raw[4*i:]))
	}
	return typ, dims, nil
}

// OpenIDX reads an IDX image file: [N,H,W] (grey, like MNIST's idx3-ubyte), [N,H,W,C] or
// [N,F] (N images of 1 x F). Unsigned bytes stay bytes; other element types become float32.
// A gzip-compressed file is decompressed.
func OpenIDX(r io.Reader) (Dataset, error) {
	br, err := gunzip(r)
	if err != nil {
		return nil, err
	}
	return openIDX(stream{br})
}

func openIDX(r source) (Dataset, error) {
	typ, dims, err := idxHeader(r)
	if err != nil {
		return nil, err
	}
	var n, h, w, c int64
	switch len(dims) {
	case 1:
		return nil, errors.New("dataset: idx: a 1-dimensional file holds labels, not images (use ReadIDXLabels)")
	case 2:
		n, h, w, c = dims[0], 1, dims[1], 1
	case 3:
		n, h, w, c = dims[0], dims[1], dims[2], 1
	case 4:
		n, h, w, c = dims[0], dims[1], dims[2], dims[3]
	}
	size := idxTypeSize(typ)
	total, err := checkShape(n, h, w, c, size)
	if err != nil {
		return nil, fmt.Errorf("dataset: idx: %w", unprefix(err))
	}
	body, err := r.body(total * size)
	if err != nil {
		return nil, fmt.Errorf("dataset: idx: %w", unprefix(err))
	}
	d := &dense{n: int(n), h: int(h), w: int(w), c: int(c)}
	if typ == idxU8 {
		d.u8 = body
		return d, nil
	}
	d.f32 = make([]float32, total)
	for i := range d.f32 {
		switch typ {
		case idxI8:
			d.f32[i] = float32(int8(body[i]))
		case idxI16:
			d.f32[i] = float32(int16(binary.BigEndian.Uint16(body[2*i:])))
		case idxI32:
			d.f32[i] = float32(int32(binary.BigEndian.Uint32(body[4*i:])))
		case idxF32:
			d.f32[i] = math.Float32frombits(binary.BigEndian.Uint32(body[4*i:]))
		case idxF64:
			d.f32[i] = float32(math.Float64frombits(binary.BigEndian.Uint64(body[8*i:])))
		}
	}
	return d, nil
}

// ReadIDXLabels reads an IDX label file (idx1-ubyte, one byte per sample), gzip-compressed
// or not.
func ReadIDXLabels(r io.Reader) ([]uint8, error) {
	br, err := gunzip(r)
	if err != nil {
		return nil, err
	}
	typ, dims, err := idxHeader(br)
	if err != nil {
		return nil, err
	}
	if typ != idxU8 || len(dims) != 1 {
		return nil, fmt.Errorf("dataset: idx: labels must be 1-dimensional unsigned bytes (got type 0x%02x, %d dimensions)", typ, len(dims))
	}
	if dims[0] > MaxSamples || dims[0] > MaxFileBytes {
		return nil, fmt.Errorf("dataset: idx: %d labels over the limits", dims[0])
	}
	body, err := readBody(br, dims[0])
	if err != nil {
		return nil, fmt.Errorf("dataset: idx: %w", unprefix(err))
	}
	return body, nil
}

// unprefix strips this package's prefix from an inner error so it is not repeated.
func unprefix(err error) error { return prefixless{err} }

type prefixless struct{ err error }

func (p prefixless) Error() string {
	s := p.err.Error()
	if len(s) > 9 && s[:9] == "dataset: " {
		return s[9:]
	}
	return s
}
func (p prefixless) Unwrap() error { return p.err }
