package dataset

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// ReadLabels reads a dataset's class labels, one per sample, telling the format from the
// bytes: an IDX label file (idx1-ubyte, like MNIST's train-labels-idx1-ubyte; read by
// ReadIDXLabels) or a .npy array of integers shaped [N] or [N,1] (int8 to int64, uint8 to
// uint64, either byte order). Either may be gzip-compressed. Floats, negative labels and
// labels over 2^31-1 are refused, as are more than MaxSamples labels. name (a file name,
// may be empty) only goes into error messages.
func ReadLabels(name string, r io.Reader) ([]int32, error) {
	labels, err := readLabels(r)
	if err != nil && name != "" {
		return nil, fmt.Errorf("dataset: %s: %w", name, unprefix(err))
	}
	return labels, err
}

func readLabels(r io.Reader) ([]int32, error) {
	br, err := gunzip(r)
	if err != nil {
		return nil, err
	}
	head, _ := br.Peek(8)
	switch {
	case bytes.HasPrefix(head, npyMagic):
		return readNPYLabels(br)
	case len(head) >= 4 && head[0] == 0 && head[1] == 0:
		u8, err := ReadIDXLabels(br)
		if err != nil {
			return nil, err
		}
		labels := make([]int32, len(u8))
		for i, v := range u8 {
			labels[i] = int32(v)
		}
		return labels, nil
	}
	return nil, errors.New("dataset: labels: unknown format (want an IDX label file or a .npy array of integers, optionally gzip-compressed)")
}

// npyLabelType is one integer element type a .npy label array may hold.
type npyLabelType struct {
	size   int64
	signed bool
}

var npyLabelTypes = map[string]npyLabelType{
	"i1": {1, true}, "i2": {2, true}, "i4": {4, true}, "i8": {8, true},
	"u1": {1, false}, "u2": {2, false}, "u4": {4, false}, "u8": {8, false},
}

// readNPYLabels reads a .npy array of integer labels shaped [N] or [N,1].
func readNPYLabels(r io.Reader) ([]int32, error) {
	h, err := readNPYHeader(r)
	if err != nil {
		return nil, err
	}
	order, typ, err := npyLabelElem(h.descr)
	if err != nil {
		return nil, err
	}
	// Fortran order is the same layout as C order for these two shapes.
	if len(h.shape) != 1 && !(len(h.shape) == 2 && h.shape[1] == 1) {
		return nil, fmt.Errorf("dataset: npy: labels shaped %v: want [N] or [N,1]", h.shape)
	}
	n := h.shape[0]
	if n < 0 || n > MaxSamples || n > MaxFileBytes/typ.size {
		return nil, fmt.Errorf("dataset: npy: %d labels over the limits (%d labels, %d bytes)", n, MaxSamples, MaxFileBytes)
	}
	body, err := readBody(r, n*typ.size)
	if err != nil {
		return nil, fmt.Errorf("dataset: npy: %w", unprefix(err))
	}
	labels := make([]int32, n)
	for i := range labels {
		b := body[int64(i)*typ.size:]
		var v uint64
		switch typ.size {
		case 1:
			v = uint64(b[0])
		case 2:
			v = uint64(order.Uint16(b))
		case 4:
			v = uint64(order.Uint32(b))
		case 8:
			v = order.Uint64(b)
		}
		if typ.signed && v>>(8*typ.size-1)&1 == 1 { // sign bit set
			return nil, fmt.Errorf("dataset: npy: label %d at index %d is negative", signExtend(v, typ.size), i)
		}
		if v > math.MaxInt32 {
			return nil, fmt.Errorf("dataset: npy: label %d at index %d does not fit in int32", v, i)
		}
		labels[i] = int32(v)
	}
	return labels, nil
}

// signExtend reads the low size bytes of v as a two's complement number.
func signExtend(v uint64, size int64) int64 {
	shift := 64 - 8*size
	return int64(v<<shift) >> shift
}

// npyLabelElem maps a descr to its byte order and integer type, refusing everything else.
func npyLabelElem(descr string) (binary.ByteOrder, npyLabelType, error) {
	var order binary.ByteOrder = binary.LittleEndian
	t := descr
	if t != "" && strings.ContainsRune("<>|=", rune(t[0])) {
		if t[0] == '>' {
			order = binary.BigEndian
		}
		t = t[1:]
	}
	if typ, ok := npyLabelTypes[t]; ok {
		return order, typ, nil
	}
	if t != "" && (t[0] == 'f' || t[0] == 'c') {
		return nil, npyLabelType{}, fmt.Errorf("dataset: npy: labels must be integers, not %q floats (numpy: labels.astype(numpy.int64))", descr)
	}
	return nil, npyLabelType{}, fmt.Errorf("dataset: npy: label type %q not supported (want int8 to int64 or uint8 to uint64)", descr)
}

// ImageFolderLabels labels a folder of images laid out like torchvision's ImageFolder, one
// sub-folder per class: names are the files' paths relative to the folder ("cat/1.png",
// "dog/2.jpg"; deeper paths such as "cat/indoor/3.png" belong to their top sub-folder).
//
// classes are the sub-folder names in byte order, and a file's label is its class's index
// there (torchvision's class_to_idx). files are the names in byte order, the order in which
// OpenImages yields them, so labels[i] is the label of sample i of OpenImages(names, ...);
// that holds too when OpenImages is given the same names under a common prefix
// ("photos/cat/1.png"), which does not change their order. torchvision orders samples by
// class first; the two orders differ only when a class name is another's prefix followed by
// a byte below '/' ("cat" and "cat-big": byte order puts cat-big/... first), and the label
// of every file is the same in both. Every name is kept, like OpenImages does (a file that
// is not an image fails when its sample is read, not here).
//
// A file at the folder's top level (no class), an empty path component at the start, a
// name listed twice, no names, or a single class (names given with the folder's own name in
// front, most likely) is an error.
func ImageFolderLabels(names []string) (files []string, labels []int32, classes []string, err error) {
	if len(names) == 0 {
		return nil, nil, nil, errors.New("dataset: image folder: no files")
	}
	if int64(len(names)) > MaxSamples {
		return nil, nil, nil, fmt.Errorf("dataset: image folder: %d files over the limit", len(names))
	}
	files = append([]string(nil), names...)
	sort.Strings(files)
	classOf := make([]string, len(files))
	seen := map[string]bool{}
	for i, f := range files {
		if i > 0 && f == files[i-1] {
			return nil, nil, nil, fmt.Errorf("dataset: image folder: %s listed twice", f)
		}
		slash := strings.IndexByte(f, '/')
		switch {
		case slash < 0:
			return nil, nil, nil, fmt.Errorf("dataset: image folder: %s is at the top level, not in a class sub-folder (want CLASS/FILE)", f)
		case slash == 0:
			return nil, nil, nil, fmt.Errorf("dataset: image folder: %q starts with '/' (want CLASS/FILE relative to the folder)", f)
		case slash == len(f)-1:
			return nil, nil, nil, fmt.Errorf("dataset: image folder: %q names a folder, not a file", f)
		}
		classOf[i] = f[:slash]
		if !seen[classOf[i]] {
			seen[classOf[i]] = true
			classes = append(classes, classOf[i])
		}
	}
	if len(classes) == 1 {
		return nil, nil, nil, fmt.Errorf("dataset: image folder: every file is in the one sub-folder %q: want one sub-folder per class, names relative to the dataset's folder", classes[0])
	}
	sort.Strings(classes)
	index := make(map[string]int32, len(classes))
	for i, c := range classes {
		index[c] = int32(i)
	}
	labels = make([]int32, len(files))
	for i, c := range classOf {
		labels[i] = index[c]
	}
	return files, labels, classes, nil
}

// CheckLabels tells whether labels fit a dataset of n samples and a model with classes
// outputs: one label per sample, each in [0, classes).
func CheckLabels(labels []int32, n int, classes int) error {
	if len(labels) != n {
		return fmt.Errorf("dataset: %d labels for %d images", len(labels), n)
	}
	if classes < 1 {
		return fmt.Errorf("dataset: %d classes (want at least 1)", classes)
	}
	for i, l := range labels {
		if l < 0 || int(l) >= classes {
			return fmt.Errorf("dataset: label %d at index %d out of range for %d classes", l, i, classes)
		}
	}
	return nil
}
