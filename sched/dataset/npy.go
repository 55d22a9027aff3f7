package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

const maxNPYHeader = 64 << 10

// npyHeader is the dictionary at the start of a .npy file.
type npyHeader struct {
	descr   string
	fortran bool
	shape   []int64
}

// OpenNPY reads a .npy array of uint8, float32 or float64 in C order, shaped [N,H,W],
// [N,H,W,C] (C <= 4), [N,C,H,W] (C <= 4 and W > 4) or [N,F]. Floats become float32.
// A gzip-compressed file is decompressed.
func OpenNPY(r io.Reader) (Dataset, error) {
	br, err := gunzip(r)
	if err != nil {
		return nil, err
	}
	return openNPY(stream{br})
}

func openNPY(r source) (Dataset, error) {
	h, err := readNPYHeader(r)
	if err != nil {
		return nil, err
	}
	if h.fortran {
		return nil, errors.New("dataset: npy: Fortran-order arrays are not supported (save with numpy.ascontiguousarray)")
	}
	order, size, err := npyElem(h.descr)
	if err != nil {
		return nil, err
	}
	n, ht, w, c, chw, err := npyLayout(h.shape)
	if err != nil {
		return nil, err
	}
	total, err := checkShape(n, ht, w, c, size)
	if err != nil {
		return nil, fmt.Errorf("dataset: npy: %w", unprefix(err))
	}
	body, err := r.body(total * size)
	if err != nil {
		return nil, fmt.Errorf("dataset: npy: %w", unprefix(err))
	}
	d := &dense{n: int(n), h: int(ht), w: int(w), c: int(c), chw: chw}
	if size == 1 {
		d.u8 = body
		return d, nil
	}
	d.f32 = make([]float32, total)
	if size == 4 {
		for i := range d.f32 {
			d.f32[i] = math.Float32frombits(order.Uint32(body[4*i:]))
		}
	} else {
		for i := range d.f32 {
			d.f32[i] = float32(math.Float64frombits(order.Uint64(body[8*i:])))
		}
	}
	return d, nil
}

func readNPYHeader(r io.Reader) (npyHeader, error) {
	var pre [10]byte
	if _, err := io.ReadFull(r, pre[:8]); err != nil {
		return npyHeader{}, fmt.Errorf("dataset: npy: short header: %w", err)
	}
	if string(pre[:6]) != string(npyMagic) {
		return npyHeader{}, errors.New("dataset: npy: bad magic (not a .npy file)")
	}
	var hlen int
	switch pre[6] {
	case 1:
		if _, err := io.ReadFull(r, pre[8:10]); err != nil {
			return npyHeader{}, fmt.Errorf("dataset: npy: short header: %w", err)
		}
		hlen = int(binary.LittleEndian.Uint16(pre[8:10]))
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return npyHeader{}, fmt.Errorf("dataset: npy: short header: %w", err)
		}
		v := binary.LittleEndian.Uint32(l[:])
		if v > maxNPYHeader {
			return npyHeader{}, fmt.Errorf("dataset: npy: header of %d bytes is too long", v)
		}
		hlen = int(v)
	default:
		return npyHeader{}, fmt.Errorf("dataset: npy: unsupported format version %d.%d", pre[6], pre[7])
	}
	raw := make([]byte, hlen)
	if _, err := io.ReadFull(r, raw); err != nil {
		return npyHeader{}, fmt.Errorf("dataset: npy: short header: %w", err)
	}
	return parseNPYHeader(string(raw))
}

// parseNPYHeader parses the Python dict literal {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), } that numpy writes.
func parseNPYHeader(s string) (npyHeader, error) {
	p := &pyParser{s: s}
	v, err := p.value(0)
	if err != nil {
		return npyHeader{}, fmt.Errorf("dataset: npy: header: %w", err)
	}
	p.space()
	if p.i != len(p.s) {
		return npyHeader{}, fmt.Errorf("dataset: npy: header: trailing text at byte %d", p.i)
	}
	d, ok := v.(map[string]any)
	if !ok {
		return npyHeader{}, errors.New("dataset: npy: header is not a dictionary")
	}
	var h npyHeader
	switch descr := d["descr"].(type) {
	case string:
		h.descr = descr
	case []any:
		return h, errors.New("dataset: npy: structured arrays are not supported")
	default:
		return h, errors.New("dataset: npy: header has no 'descr' string")
	}
	fo, ok := d["fortran_order"].(bool)
	if !ok {
		return h, errors.New("dataset: npy: header has no 'fortran_order' boolean")
	}
	h.fortran = fo
	shape, ok := d["shape"].([]any)
	if !ok {
		return h, errors.New("dataset: npy: header has no 'shape' tuple")
	}
	for _, e := range shape {
		n, ok := e.(int64)
		if !ok {
			return h, errors.New("dataset: npy: shape holds a non-integer")
		}
		h.shape = append(h.shape, n)
	}
	return h, nil
}

// npyElem maps a descr to its byte order and element size (1, 4 or 8).
func npyElem(descr string) (binary.ByteOrder, int64, error) {
	if strings.Contains(descr, "O") {
		return nil, 0, errors.New("dataset: npy: object arrays (pickles) are not supported")
	}
	var order binary.ByteOrder = binary.LittleEndian
	t := descr
	if t != "" && strings.ContainsRune("<>|=", rune(t[0])) {
		if t[0] == '>' {
			order = binary.BigEndian
		}
		t = t[1:]
	}
	switch t {
	case "u1":
		return order, 1, nil
	case "f4":
		return order, 4, nil
	case "f8":
		return order, 8, nil
	}
	return nil, 0, fmt.Errorf("dataset: npy: element type %q not supported (want uint8, float32 or float64)", descr)
}

// npyLayout interprets an array shape as N samples of H x W x C.
func npyLayout(shape []int64) (n, h, w, c int64, chw bool, err error) {
	switch len(shape) {
	case 2:
		return shape[0], 1, shape[1], 1, false, nil
	case 3:
		return shape[0], shape[1], shape[2], 1, false, nil
	case 4:
		switch {
		case shape[3] >= 1 && shape[3] <= 4:
			return shape[0], shape[1], shape[2], shape[3], false, nil
		case shape[1] >= 1 && shape[1] <= 4:
			return shape[0], shape[2], shape[3], shape[1], true, nil
		}
		return 0, 0, 0, 0, false, fmt.Errorf("dataset: npy: shape %v has no channel dimension of 1 to 4 (want [N,H,W,C] or [N,C,H,W])", shape)
	}
	return 0, 0, 0, 0, false, fmt.Errorf("dataset: npy: shape %v not supported (want [N,H,W], [N,H,W,C], [N,C,H,W] or [N,F])", shape)
}

// pyParser reads the subset of Python literals numpy headers use: dicts, tuples, lists,
// strings, integers, True, False and None.
type pyParser struct {
	s string
	i int
}

const maxPyDepth = 8

func (p *pyParser) space() {
	for p.i < len(p.s) && strings.ContainsRune(" \t\r\n", rune(p.s[p.i])) {
		p.i++
	}
}

func (p *pyParser) value(depth int) (any, error) {
	if depth > maxPyDepth {
		return nil, errors.New("nested too deep")
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, errors.New("unexpected end")
	}
	switch ch := p.s[p.i]; {
	case ch == '{':
		return p.dict(depth)
	case ch == '(' || ch == '[':
		return p.seq(depth)
	case ch == '\'' || ch == '"':
		return p.str()
	case ch >= '0' && ch <= '9' || ch == '-':
		j := p.i + 1
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		n, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad integer at byte %d", p.i)
		}
		p.i = j
		if p.i < len(p.s) && p.s[p.i] == 'L' { // Python 2 long
			p.i++
		}
		return n, nil
	}
	for _, w := range []struct {
		word string
		v    any
	}{{"True", true}, {"False", false}, {"None", nil}} {
		if strings.HasPrefix(p.s[p.i:], w.word) {
			p.i += len(w.word)
			return w.v, nil
		}
	}
	return nil, fmt.Errorf("unexpected %q at byte %d", p.s[p.i], p.i)
}

func (p *pyParser) str() (string, error) {
	q := p.s[p.i]
	j := strings.IndexByte(p.s[p.i+1:], q)
	if j < 0 {
		return "", errors.New("unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+j]
	p.i += j + 2
	return v, nil
}

func (p *pyParser) dict(depth int) (any, error) {
	p.i++ // '{'
	d := map[string]any{}
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return d, nil
		}
		k, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, errors.New("dictionary key is not a string")
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, fmt.Errorf("expected ':' at byte %d", p.i)
		}
		p.i++
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d[ks] = v
		if err := p.sep('}'); err != nil {
			return nil, err
		}
	}
}

func (p *pyParser) seq(depth int) (any, error) {
	end := byte(')')
	if p.s[p.i] == '[' {
		end = ']'
	}
	p.i++
	var out []any
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			return out, nil
		}
		if len(out) >= 64 {
			return nil, errors.New("sequence too long")
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if err := p.sep(end); err != nil {
			return nil, err
		}
	}
}

// sep consumes a ',' or leaves the closing bracket for the caller.
func (p *pyParser) sep(end byte) error {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == ',' {
		p.i++
		return nil
	}
	if p.i < len(p.s) && p.s[p.i] == end {
		return nil
	}
	return fmt.Errorf("expected ',' or %q at byte %d", end, p.i)
}
