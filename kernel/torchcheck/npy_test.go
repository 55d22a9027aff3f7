package torchcheck

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// The .npy files train_ref.py reads and writes: float32 and int64 arrays from the tests,
// float64 arrays back. Only our own files pass through here (numpy.save's version 1.0 and
// 2.0 layouts, little-endian, C order), so the reader is strict rather than general.

// writeNPY writes data ([]float32 or []int64) as a version 1.0 .npy array of shape dims.
func writeNPY(path string, dims []int64, data any) error {
	var descr string
	var body bytes.Buffer
	switch v := data.(type) {
	case []float32:
		descr = "<f4"
		binary.Write(&body, binary.LittleEndian, v)
	case []int64:
		descr = "<i8"
		binary.Write(&body, binary.LittleEndian, v)
	default:
		return fmt.Errorf("torchcheck: npy: cannot write %T", data)
	}
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = strconv.FormatInt(d, 10)
	}
	shape := "(" + strings.Join(parts, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s), }", descr, shape)
	hdr += strings.Repeat(" ", (64-(10+len(hdr)+1)%64)%64) + "\n"
	var out bytes.Buffer
	out.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&out, binary.LittleEndian, uint16(len(hdr)))
	out.WriteString(hdr)
	out.Write(body.Bytes())
	return os.WriteFile(path, out.Bytes(), 0o644)
}

var (
	npyDescr = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	npyOrder = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// readNPYFloat64 reads a little-endian float64 .npy file in C order: its values and shape.
func readNPYFloat64(path string) ([]float64, []int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if len(b) < 12 || string(b[:6]) != "\x93NUMPY" {
		return nil, nil, fmt.Errorf("torchcheck: %s: not a .npy file", path)
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		hlen, start = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return nil, nil, fmt.Errorf("torchcheck: %s: .npy version %d", path, b[6])
	}
	if start+hlen > len(b) {
		return nil, nil, fmt.Errorf("torchcheck: %s: truncated header", path)
	}
	hdr := string(b[start : start+hlen])
	descr, order, shape := npyDescr.FindStringSubmatch(hdr), npyOrder.FindStringSubmatch(hdr), npyShape.FindStringSubmatch(hdr)
	if descr == nil || order == nil || shape == nil {
		return nil, nil, fmt.Errorf("torchcheck: %s: header %q", path, hdr)
	}
	if descr[1] != "<f8" || order[1] != "False" {
		return nil, nil, fmt.Errorf("torchcheck: %s: %s (fortran_order %s), want <f8 in C order", path, descr[1], order[1])
	}
	var dims []int64
	n := int64(1)
	for _, s := range strings.Split(shape[1], ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := strconv.ParseInt(s, 10, 64)
		if err != nil || d < 0 {
			return nil, nil, fmt.Errorf("torchcheck: %s: shape %q", path, shape[1])
		}
		dims = append(dims, d)
		n *= d
	}
	body := b[start+hlen:]
	if int64(len(body)) != 8*n {
		return nil, nil, fmt.Errorf("torchcheck: %s: shape %v needs %d bytes, file holds %d", path, dims, 8*n, len(body))
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(body[8*i:]))
	}
	return out, dims, nil
}
