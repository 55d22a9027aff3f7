package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Limits on what a reader accepts. They bound memory whatever a file's header declares.
var (
	MaxFileBytes   int64 = 2 << 30  // decompressed size of one IDX or .npy file
	MaxImagePixels int64 = 64 << 20 // width*height of one PNG/JPEG image
	MaxSamples     int64 = 1 << 31  // samples in one dataset
)

// maxDim bounds any single declared dimension of a sample (height, width, channels).
const maxDim = 1 << 20

// Image is one sample in HWC order (channels interleaved, rows top to bottom). Exactly one of
// U8 and F32 holds len H*W*C values. Images a Dataset returns may share memory with it: do
// not modify them.
type Image struct {
	H, W, C int
	U8      []uint8
	F32     []float32

	chw bool // internal views only: values stored channels first
}

// plane returns channel c of a channels-first view as a one-channel image.
func (im Image) plane(c int) Image {
	n := im.H * im.W
	out := Image{H: im.H, W: im.W, C: 1}
	if im.U8 != nil {
		out.U8 = im.U8[c*n : (c+1)*n]
	} else {
		out.F32 = im.F32[c*n : (c+1)*n]
	}
	return out
}

// Len is the number of values the image holds.
func (im Image) Len() int { return im.H * im.W * im.C }

// Dataset is an ordered list of images; sample i is query i.
type Dataset interface {
	Len() int
	Sample(i int) (Image, error)
}

// Format names a dataset file format.
type Format int

// The formats Detect knows.
const (
	FormatUnknown Format = iota
	FormatIDX
	FormatNPY
	FormatImage // one PNG or JPEG file; a folder of them is a FormatImage dataset
)

func (f Format) String() string {
	switch f {
	case FormatIDX:
		return "idx"
	case FormatNPY:
		return "npy"
	case FormatImage:
		return "image"
	}
	return "unknown"
}

var (
	npyMagic  = []byte("\x93NUMPY")
	pngMagic  = []byte("\x89PNG\r\n\x1a\n")
	jpegMagic = []byte{0xff, 0xd8, 0xff}
	gzipMagic = []byte{0x1f, 0x8b}
)

// Detect tells a file's format from its first bytes (16 are enough; gzip-compressed files
// need a few hundred), falling back on its name when the bytes do not decide.
func Detect(name string, head []byte) (Format, error) {
	if bytes.HasPrefix(head, gzipMagic) {
		zr, err := gzip.NewReader(bytes.NewReader(head))
		if err == nil {
			inner := make([]byte, 16)
			n, _ := io.ReadFull(zr, inner)
			head = inner[:n]
		}
		name = strings.TrimSuffix(name, ".gz")
	}
	switch {
	case bytes.HasPrefix(head, npyMagic):
		return FormatNPY, nil
	case bytes.HasPrefix(head, pngMagic), bytes.HasPrefix(head, jpegMagic):
		return FormatImage, nil
	case len(head) >= 4 && head[0] == 0 && head[1] == 0 && idxTypeSize(head[2]) > 0 && head[3] >= 1 && head[3] <= 4:
		return FormatIDX, nil
	}
	lower := strings.ToLower(path.Base(name))
	switch {
	case strings.HasSuffix(lower, ".npy"):
		return FormatNPY, nil
	case strings.HasSuffix(lower, ".png"), strings.HasSuffix(lower, ".jpg"), strings.HasSuffix(lower, ".jpeg"):
		return FormatImage, nil
	case strings.Contains(lower, "-idx") || strings.HasSuffix(lower, ".idx"):
		return FormatIDX, nil
	}
	return FormatUnknown, fmt.Errorf("dataset: %s: unknown format (want IDX, .npy, PNG or JPEG)", name)
}

// Open reads an IDX or .npy dataset, gzip-compressed or not, telling which from its bytes.
func Open(r io.Reader) (Dataset, error) {
	br, err := gunzip(r)
	if err != nil {
		return nil, err
	}
	head, _ := br.Peek(8)
	switch {
	case bytes.HasPrefix(head, npyMagic):
		return openNPY(stream{br})
	case len(head) >= 4 && head[0] == 0 && head[1] == 0:
		return openIDX(stream{br})
	case bytes.HasPrefix(head, pngMagic), bytes.HasPrefix(head, jpegMagic):
		return nil, errors.New("dataset: a single image is not a dataset: use a folder of images (OpenImages)")
	}
	return nil, errors.New("dataset: unknown format (want IDX or .npy, optionally gzip-compressed)")
}

// OpenBytes is Open over a file already in memory. Uncompressed uint8 data is used in
// place, not copied: b must not change while the dataset is in use.
func OpenBytes(b []byte) (Dataset, error) {
	if Gzipped(b) {
		return Open(bytes.NewReader(b))
	}
	if int64(len(b)) > MaxFileBytes+64<<10 {
		return nil, fmt.Errorf("dataset: file of %d bytes over the %d-byte limit", len(b), MaxFileBytes)
	}
	src := memory{bytes.NewReader(b), b}
	switch {
	case bytes.HasPrefix(b, npyMagic):
		return openNPY(src)
	case len(b) >= 4 && b[0] == 0 && b[1] == 0:
		return openIDX(src)
	}
	return Open(bytes.NewReader(b))
}

// source is what the decoders read: a header through io.Reader, then the data in one piece.
type source interface {
	io.Reader
	body(want int64) ([]byte, error)
}

// stream reads the data from a reader, allocating as it arrives.
type stream struct{ io.Reader }

func (s stream) body(want int64) ([]byte, error) { return readBody(s.Reader, want) }

// memory hands out the rest of an in-memory file without copying.
type memory struct {
	*bytes.Reader
	b []byte
}

func (m memory) body(want int64) ([]byte, error) {
	rest := m.b[len(m.b)-m.Len():]
	switch n := int64(len(rest)); {
	case n < want:
		return nil, fmt.Errorf("dataset: truncated: header declares %d data bytes, file holds %d", want, n)
	case n > want:
		return nil, fmt.Errorf("dataset: %d trailing bytes after the declared data", n-want)
	}
	return rest, nil
}

// Gzipped reports whether b is gzip-compressed.
func Gzipped(b []byte) bool { return bytes.HasPrefix(b, gzipMagic) }

// Gunzip decompresses a gzip file in memory, refusing one whose content passes
// MaxFileBytes (a small file can expand without bound).
func Gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("dataset: gzip: %w", err)
	}
	var out bytes.Buffer
	n, err := out.ReadFrom(io.LimitReader(zr, MaxFileBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("dataset: gzip: %w", err)
	case n > MaxFileBytes:
		return nil, fmt.Errorf("dataset: gzip content over the %d-byte limit", MaxFileBytes)
	}
	return out.Bytes(), nil
}

// gunzip returns a buffered reader of r's content, decompressed when r is gzip, limited to
// MaxFileBytes+1 bytes so that readers notice an oversized file.
func gunzip(r io.Reader) (*bufio.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(2)
	var src io.Reader = br
	if bytes.Equal(head, gzipMagic) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("dataset: gzip: %w", err)
		}
		src = zr
	}
	return bufio.NewReaderSize(io.LimitReader(src, MaxFileBytes+1), 64<<10), nil
}

// readBody reads exactly want bytes (the size a header declared, already checked against
// MaxFileBytes) and fails if the file holds fewer or more. It allocates only as the bytes
// arrive, so a lying header costs nothing.
func readBody(r io.Reader, want int64) ([]byte, error) {
	var buf bytes.Buffer
	if want < 1<<20 {
		buf.Grow(int(want))
	}
	n, err := io.Copy(&buf, io.LimitReader(r, want+1))
	if err != nil {
		return nil, fmt.Errorf("dataset: read: %w", err)
	}
	if n < want {
		return nil, fmt.Errorf("dataset: truncated: header declares %d data bytes, file holds %d", want, n)
	}
	if n > want {
		return nil, fmt.Errorf("dataset: %d trailing bytes after the declared data", n-want)
	}
	return buf.Bytes(), nil
}

// checkShape validates a dataset's sample count and per-sample shape and returns the total
// number of elements, refusing anything over the limits before allocation.
func checkShape(n, h, w, c int64, elemSize int64) (int64, error) {
	if n < 0 || h <= 0 || w <= 0 || c <= 0 {
		return 0, fmt.Errorf("dataset: bad shape [%d,%d,%d,%d]", n, h, w, c)
	}
	if n > MaxSamples || h > maxDim || w > maxDim || c > maxDim {
		return 0, fmt.Errorf("dataset: shape [%d,%d,%d,%d] over the limits", n, h, w, c)
	}
	per := h * w * c
	if per > MaxImagePixels*4 {
		return 0, fmt.Errorf("dataset: sample of %dx%dx%d values is too large", h, w, c)
	}
	if n > 0 && per*elemSize > MaxFileBytes/n {
		return 0, fmt.Errorf("dataset: %d samples of %dx%dx%d values exceed the %d-byte limit", n, h, w, c, MaxFileBytes)
	}
	return n * per, nil
}

// dense is an in-memory dataset of same-shaped samples, stored N x (H*W*C) with each sample
// either HWC or CHW.
type dense struct {
	n, h, w, c int
	chw        bool // samples stored channels first; Sample transposes to HWC
	u8         []uint8
	f32        []float32
}

func (d *dense) Len() int { return d.n }

// view returns sample i without copying: channels-first data comes back as a planar view.
func (d *dense) view(i int) (Image, error) {
	if !d.chw || d.c == 1 || i < 0 || i >= d.n {
		return d.Sample(i)
	}
	per := d.h * d.w * d.c
	im := Image{H: d.h, W: d.w, C: d.c, chw: true}
	if d.u8 != nil {
		im.U8 = d.u8[i*per : (i+1)*per : (i+1)*per]
	} else {
		im.F32 = d.f32[i*per : (i+1)*per : (i+1)*per]
	}
	return im, nil
}

func (d *dense) Sample(i int) (Image, error) {
	if i < 0 || i >= d.n {
		return Image{}, fmt.Errorf("dataset: sample %d out of range [0,%d)", i, d.n)
	}
	per := d.h * d.w * d.c
	im := Image{H: d.h, W: d.w, C: d.c}
	if !d.chw || d.c == 1 {
		if d.u8 != nil {
			im.U8 = d.u8[i*per : (i+1)*per : (i+1)*per]
		} else {
			im.F32 = d.f32[i*per : (i+1)*per : (i+1)*per]
		}
		return im, nil
	}
	plane := d.h * d.w
	if d.u8 != nil {
		src, dst := d.u8[i*per:(i+1)*per], make([]uint8, per)
		for ch := 0; ch < d.c; ch++ {
			for p := 0; p < plane; p++ {
				dst[p*d.c+ch] = src[ch*plane+p]
			}
		}
		im.U8 = dst
	} else {
		src, dst := d.f32[i*per:(i+1)*per], make([]float32, per)
		for ch := 0; ch < d.c; ch++ {
			for p := 0; p < plane; p++ {
				dst[p*d.c+ch] = src[ch*plane+p]
			}
		}
		im.F32 = dst
	}
	return im, nil
}
