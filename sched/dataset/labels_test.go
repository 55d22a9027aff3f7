package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const fashionTrainLabels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"
const fashionTrainImages = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

// npyLabels writes vals as a .npy array of the given descr ("<i8", ">u2", "|u1", ...) and
// shape tuple text ("(3,)", "(3, 1)"), as numpy.save does.
func npyLabels(descr, shape string, vals []int64) []byte {
	var order binary.AppendByteOrder = binary.LittleEndian
	if descr[0] == '>' {
		order = binary.BigEndian
	}
	var body []byte
	for _, v := range vals {
		switch descr[2] {
		case '1':
			body = append(body, byte(v))
		case '2':
			body = order.AppendUint16(body, uint16(v))
		case '4':
			body = order.AppendUint32(body, uint32(v))
		case '8':
			body = order.AppendUint64(body, uint64(v))
		}
	}
	return npyWithHeader(fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape), body)
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// TestReadLabelsFashionMNIST reads Debian's Fashion-MNIST label files (gzip and plain) and
// checks them against ReadIDXLabels, the image files' lengths and the known class counts.
func TestReadLabelsFashionMNIST(t *testing.T) {
	for _, c := range []struct{ labels, images string }{{fashionTrainLabels, fashionTrainImages}, {fashionLabels, fashionImages}} {
		gz, err := os.ReadFile(c.labels)
		if err != nil {
			t.Skipf("Fashion-MNIST is not installed (Debian package dataset-fashion-mnist; make test-deps installs it): %v", err)
		}
		name := filepath.Base(c.labels)
		labels, err := ReadLabels(name, bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := ReadLabels(strings.TrimSuffix(name, ".gz"), bytes.NewReader(gunzipBytes(t, gz)))
		if err != nil || !reflect.DeepEqual(plain, labels) {
			t.Fatalf("%s: plain file gives %d labels (%v), gzip %d", name, len(plain), err, len(labels))
		}
		u8, err := ReadIDXLabels(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		counts := make([]int, 10)
		for i, l := range labels {
			if l != int32(u8[i]) {
				t.Fatalf("%s: label %d is %d, ReadIDXLabels says %d", name, i, l, u8[i])
			}
			counts[l]++
		}
		ds, err := Open(bytes.NewReader(readFile(t, c.images)))
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckLabels(labels, ds.Len(), 10); err != nil {
			t.Fatal(err)
		}
		per := ds.Len() / 10 // Fashion-MNIST is balanced: 6,000 of each class to train, 1,000 to test
		for class, n := range counts {
			if n != per {
				t.Errorf("%s: class %d has %d labels, want %d", name, class, n, per)
			}
		}
		if labels[0] != 9 { // both files start with an ankle boot
			t.Errorf("%s: first label %d, want 9", name, labels[0])
		}
		err = CheckLabels(labels[1:], ds.Len(), 10)
		if want := fmt.Sprintf("dataset: %d labels for %d images", ds.Len()-1, ds.Len()); err == nil || err.Error() != want {
			t.Errorf("one label short: %v, want %q", err, want)
		}
		if err := CheckLabels(labels, ds.Len(), 9); err == nil || !strings.Contains(err.Error(), "label 9 at index 0 out of range for 9 classes") {
			t.Errorf("9 classes: %v", err)
		}
		// The same labels as numpy would save them: int64, big-endian uint16, (N,1) int32.
		vals := make([]int64, len(labels))
		for i, l := range labels {
			vals[i] = int64(l)
		}
		for _, f := range [][]byte{
			npyLabels("<i8", fmt.Sprintf("(%d,)", len(vals)), vals),
			gzipBytes(npyLabels(">u2", fmt.Sprintf("(%d,)", len(vals)), vals)),
			npyLabels("<i4", fmt.Sprintf("(%d, 1)", len(vals)), vals),
		} {
			back, err := ReadLabels("labels.npy", bytes.NewReader(f))
			if err != nil || !reflect.DeepEqual(back, labels) {
				t.Fatalf("%s as .npy: %v", name, err)
			}
		}
	}
}

// TestReadLabelsRoundTrips writes labels with WriteIDX, WriteNPY and every integer .npy
// type in both byte orders, and reads them back.
func TestReadLabelsRoundTrips(t *testing.T) {
	u8 := []uint8{3, 0, 255, 7, 1}
	want := []int32{3, 0, 255, 7, 1}
	var idx, npy bytes.Buffer
	if err := WriteIDX(&idx, []int{len(u8)}, u8); err != nil {
		t.Fatal(err)
	}
	if err := WriteNPY(&npy, []int{len(u8)}, u8); err != nil {
		t.Fatal(err)
	}
	for what, b := range map[string][]byte{"idx": idx.Bytes(), "idx.gz": gzipBytes(idx.Bytes()), "npy": npy.Bytes(), "npy.gz": gzipBytes(npy.Bytes())} {
		got, err := ReadLabels(what, bytes.NewReader(b))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v", what, got, err)
		}
	}
	empty, err := ReadLabels("", bytes.NewReader(npyLabels("<i8", "(0,)", nil)))
	if err != nil || len(empty) != 0 {
		t.Errorf("no labels: %v %v", empty, err)
	}
	for _, descr := range []string{"|i1", "|u1", "<i2", ">i2", "<u2", ">u2", "<i4", ">i4", "<u4", ">u4", "<i8", ">i8", "<u8", ">u8", "=i4"} {
		max := int64(127)
		switch descr[1:] {
		case "u1":
			max = 255
		case "i2":
			max = math.MaxInt16
		case "u2":
			max = math.MaxUint16
		case "i4", "u4", "i8", "u8":
			max = math.MaxInt32
		}
		vals := []int64{0, 1, max, 2, max - 1}
		for _, shape := range []string{"(5,)", "(5, 1)"} {
			got, err := ReadLabels("", bytes.NewReader(npyLabels(descr, shape, vals)))
			if err != nil {
				t.Errorf("%s %s: %v", descr, shape, err)
				continue
			}
			for i, v := range vals {
				if int64(got[i]) != v {
					t.Errorf("%s %s: label %d is %d, want %d", descr, shape, i, got[i], v)
				}
			}
		}
	}
	// Fortran order is the same bytes for a column, as numpy may write it.
	col := npyWithHeader("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 1), }", binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 4), 5))
	if got, err := ReadLabels("", bytes.NewReader(col)); err != nil || !reflect.DeepEqual(got, []int32{4, 5}) {
		t.Errorf("Fortran-order column: %v %v", got, err)
	}
}

func TestReadLabelsRejects(t *testing.T) {
	hdr := func(descr, shape string, body []byte) []byte {
		return npyWithHeader(fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape), body)
	}
	cases := map[string]struct {
		in   []byte
		want string
	}{
		"float32":      {hdr("<f4", "(2,)", make([]byte, 8)), `labels must be integers, not "<f4" floats`},
		"float64 NaN":  {hdr("<f8", "(1,)", binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.NaN()))), "labels must be integers"},
		"float16":      {hdr("<f2", "(1,)", make([]byte, 2)), "labels must be integers"},
		"bool":         {hdr("|b1", "(1,)", []byte{1}), `label type "|b1" not supported`},
		"pickle":       {hdr("|O", "(1,)", make([]byte, 8)), "not supported"},
		"negative i1":  {npyLabels("|i1", "(3,)", []int64{0, 1, -1}), "label -1 at index 2 is negative"},
		"negative i8":  {npyLabels(">i8", "(1,)", []int64{-5}), "label -5 at index 0 is negative"},
		"over int32":   {npyLabels("<i8", "(2,)", []int64{1, 1 << 31}), "label 2147483648 at index 1 does not fit in int32"},
		"over u4":      {npyLabels("<u4", "(1,)", []int64{math.MaxUint32}), "does not fit in int32"},
		"2-D":          {npyLabels("<i4", "(2, 2)", []int64{0, 1, 2, 3}), "want [N] or [N,1]"},
		"3-D":          {npyLabels("<i4", "(2, 1, 1)", []int64{0, 1}), "want [N] or [N,1]"},
		"scalar":       {npyLabels("<i4", "()", []int64{0}), "want [N] or [N,1]"},
		"negative N":   {npyLabels("<i4", "(-1,)", nil), "over the limits"},
		"huge N":       {npyLabels("<i8", "(4000000000,)", nil), "over the limits"},
		"short header": {npyLabels("<i4", "(3,)", []int64{0, 1})[:20], "short header"},
		"short body":   {npyLabels("<i4", "(3,)", []int64{0, 1}), "truncated"},
		"trailing":     {npyLabels("<i2", "(1,)", []int64{0, 1}), "trailing"},
		"idx images":   {idxFile(0x08, []uint32{1, 2, 2}, make([]byte, 4)), "labels must be 1-dimensional unsigned bytes"},
		"idx int32":    {idxFile(0x0C, []uint32{2}, make([]byte, 8)), "labels must be 1-dimensional unsigned bytes"},
		"idx short":    {idxFile(0x08, []uint32{5}, make([]byte, 4)), "truncated"},
		"idx huge":     {idxFile(0x08, []uint32{0xffffffff}, nil), "over the limits"},
		"text":         {[]byte("0,1,2\n"), "unknown format"},
		"empty":        {nil, "unknown format"},
		"png":          {pngMagic, "unknown format"},
		"bad gzip":     {[]byte{0x1f, 0x8b, 0, 0}, "gzip"},
		"gzip twice":   {gzipBytes(gzipBytes(npyLabels("<i4", "(1,)", []int64{1}))), "unknown format"},
	}
	for what, c := range cases {
		_, err := ReadLabels("y.bin", bytes.NewReader(c.in))
		if err == nil || !strings.HasPrefix(err.Error(), "dataset: y.bin: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a dataset error naming y.bin and saying %q", what, err, c.want)
		}
		if _, err := ReadLabels("", bytes.NewReader(c.in)); err == nil || !strings.HasPrefix(err.Error(), "dataset: ") || strings.HasPrefix(err.Error(), "dataset: dataset: ") {
			t.Errorf("%s without a name: %v", what, err)
		}
	}
}

func TestCheckLabels(t *testing.T) {
	labels := make([]int32, 400)
	labels[345] = 12
	for _, c := range []struct {
		labels     []int32
		n, classes int
		want       string
	}{
		{labels, 400, 13, ""},
		{labels, 400, 10, "dataset: label 12 at index 345 out of range for 10 classes"},
		{[]int32{0, -1}, 2, 10, "dataset: label -1 at index 1 out of range for 10 classes"},
		{labels[1:], 400, 13, "dataset: 399 labels for 400 images"},
		{nil, 0, 1, ""},
		{[]int32{0}, 1, 0, "dataset: 0 classes (want at least 1)"},
	} {
		err := CheckLabels(c.labels, c.n, c.classes)
		if c.want == "" && err != nil || c.want != "" && (err == nil || err.Error() != c.want) {
			t.Errorf("%d labels, n %d, %d classes: got %v, want %q", len(c.labels), c.n, c.classes, err, c.want)
		}
	}
}

func TestImageFolderLabels(t *testing.T) {
	names := []string{"dog/2.jpg", "cat/1.png", "cat-big/9.png", "bird/a/b/3.png", "cat/10.png", "bird/0.png", "cat.old/x.png"}
	files, labels, classes, err := ImageFolderLabels(names)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bird", "cat", "cat-big", "cat.old", "dog"}; !reflect.DeepEqual(classes, want) {
		t.Fatalf("classes %q, want %q", classes, want)
	}
	// Byte order, as OpenImages yields samples: "cat-big/" and "cat.old/" sort before "cat/"
	// ('-' and '.' are below '/'), where torchvision would list cat's files first.
	wantFiles := []string{"bird/0.png", "bird/a/b/3.png", "cat-big/9.png", "cat.old/x.png", "cat/1.png", "cat/10.png", "dog/2.jpg"}
	wantLabels := []int32{0, 0, 2, 3, 1, 1, 4}
	if !reflect.DeepEqual(files, wantFiles) || !reflect.DeepEqual(labels, wantLabels) {
		t.Fatalf("files %q labels %v, want %q %v", files, labels, wantFiles, wantLabels)
	}
	if names[0] != "dog/2.jpg" {
		t.Error("the caller's slice was reordered")
	}
	// The i-th label belongs to OpenImages' i-th sample, with or without the folder's prefix.
	for _, prefix := range []string{"", "photos/"} {
		full := make([]string, len(names))
		for i, n := range names {
			full[i] = prefix + n
		}
		ds, err := OpenImages(full, func(string) ([]byte, error) { return nil, os.ErrNotExist })
		if err != nil {
			t.Fatal(err)
		}
		for i := range files {
			if got := ds.(*images).Name(i); got != prefix+files[i] {
				t.Errorf("prefix %q: OpenImages' sample %d is %s, ImageFolderLabels' file %d is %s", prefix, i, got, i, files[i])
			}
		}
	}
	for what, c := range map[string]struct {
		names []string
		want  string
	}{
		"top level":  {[]string{"cat/1.png", "readme.png", "dog/2.png"}, "dataset: image folder: readme.png is at the top level, not in a class sub-folder"},
		"twice":      {[]string{"cat/1.png", "dog/2.png", "cat/1.png"}, "cat/1.png listed twice"},
		"none":       {nil, "no files"},
		"slash":      {[]string{"/cat/1.png", "dog/2.png"}, "starts with '/'"},
		"folder":     {[]string{"cat/", "dog/2.png"}, "names a folder"},
		"one class":  {[]string{"photos/cat/1.png", "photos/dog/2.png"}, `every file is in the one sub-folder "photos"`},
		"one folder": {[]string{"cat/1.png"}, "one sub-folder"},
	} {
		if _, _, _, err := ImageFolderLabels(c.names); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "dataset: ") {
			t.Errorf("%s: got %v, want %q", what, err, c.want)
		}
	}
}

// TestImageFolderLabelsOnDisk lays out a folder of PNGs whose grey level encodes their class,
// lists it as putdir stores it (relative paths with '/'), and checks that each label matches
// the pixels of the sample OpenImages yields at the same index.
func TestImageFolderLabelsOnDisk(t *testing.T) {
	dir := t.TempDir()
	classes := []string{"trouser", "t-shirt", "bag", "bag-small", "ankle boot"}
	for ci, c := range classes {
		for k := 0; k < 3; k++ {
			img := image.NewGray(image.Rect(0, 0, 4, 4))
			for p := range img.Pix {
				img.Pix[p] = uint8(ci * 40)
			}
			sub := filepath.Join(dir, c)
			if k == 2 {
				sub = filepath.Join(sub, "more")
			}
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.Create(filepath.Join(sub, fmt.Sprintf("%d.png", 10-k)))
			if err != nil {
				t.Fatal(err)
			}
			if err := png.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		names = append(names, "set/"+filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rel := make([]string, len(names))
	for i, n := range names {
		rel[i] = strings.TrimPrefix(n, "set/")
	}
	_, labels, got, err := ImageFolderLabels(rel)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ankle boot", "bag", "bag-small", "t-shirt", "trouser"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("classes %q, want %q", got, want)
	}
	ds, err := OpenImages(names, func(name string) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(name, "set/"))))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckLabels(labels, ds.Len(), len(got)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < ds.Len(); i++ {
		im, err := ds.Sample(i)
		if err != nil {
			t.Fatal(err)
		}
		class := got[labels[i]]
		want := uint8(0)
		for ci, c := range classes {
			if c == class {
				want = uint8(ci * 40)
			}
		}
		if im.U8[0] != want {
			t.Errorf("sample %d (%s) has grey %d, its label %d (%s) says %d", i, ds.(*images).Name(i), im.U8[0], labels[i], class, want)
		}
	}
}

func FuzzReadLabels(f *testing.F) {
	var idx bytes.Buffer
	WriteIDX(&idx, []int{4}, []uint8{1, 0, 9, 3})
	f.Add(idx.Bytes())
	f.Add(gzipBytes(idx.Bytes()))
	var npy bytes.Buffer
	WriteNPY(&npy, []int{3}, []uint8{2, 5, 0})
	f.Add(npy.Bytes())
	for _, descr := range []string{"|i1", "<i2", ">u2", "<i4", ">u4", "<i8", ">i8", "<u8"} {
		f.Add(npyLabels(descr, "(3,)", []int64{0, 7, 1}))
	}
	f.Add(npyLabels("<i4", "(2, 1)", []int64{4, 2}))
	f.Add(gzipBytes(npyLabels("<i8", "(2,)", []int64{4, 2})))
	f.Add(npyLabels("<i8", "(2,)", []int64{-1, 1 << 40}))
	f.Add(npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", make([]byte, 4)))
	f.Add(idxFile(0x08, []uint32{0xffffffff}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		labels, err := ReadLabels("fuzz", bytes.NewReader(b))
		u8, errIDX := ReadIDXLabels(bytes.NewReader(b))
		if errIDX == nil && err != nil {
			t.Fatalf("ReadIDXLabels reads it, ReadLabels says %v", err)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "dataset: fuzz: ") {
				t.Fatalf("error without the prefix: %v", err)
			}
			return
		}
		vals := make([]int64, len(labels))
		for i, l := range labels {
			if l < 0 {
				t.Fatalf("label %d is negative: %d", i, l)
			}
			vals[i] = int64(l)
		}
		if len(labels) > len(b)*1100 { // gzip expands at most ~1032x
			t.Fatalf("%d labels from %d bytes", len(labels), len(b))
		}
		back, err := ReadLabels("", bytes.NewReader(npyLabels("<i4", fmt.Sprintf("(%d,)", len(vals)), vals)))
		if err != nil || len(back) != len(labels) || (len(back) > 0 && !reflect.DeepEqual(back, labels)) {
			t.Fatalf("labels written back as int32 .npy read as %d labels, %v", len(back), err)
		}
		if errIDX == nil {
			for i, v := range u8 {
				if labels[i] != int32(v) {
					t.Fatalf("label %d: %d, ReadIDXLabels %d", i, labels[i], v)
				}
			}
		}
	})
}

func FuzzImageFolderLabels(f *testing.F) {
	f.Add("cat/1.png\ndog/2.png\ncat-big/3.png")
	f.Add("a/x\na/y/z\nb/q")
	f.Add("top.png\ncat/1.png")
	f.Add("/a\nb/c")
	f.Fuzz(func(t *testing.T, list string) {
		names := strings.Split(list, "\n")
		files, labels, classes, err := ImageFolderLabels(names)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "dataset: image folder: ") {
				t.Fatalf("error without the prefix: %v", err)
			}
			return
		}
		if len(files) != len(names) || len(labels) != len(names) || len(classes) < 2 {
			t.Fatalf("%d names gave %d files, %d labels, %d classes", len(names), len(files), len(labels), len(classes))
		}
		if err := CheckLabels(labels, len(files), len(classes)); err != nil {
			t.Fatal(err)
		}
		for i, c := range classes {
			if i > 0 && classes[i-1] >= c {
				t.Fatalf("classes %q not sorted and unique", classes)
			}
		}
		ds, err := OpenImages(names, func(string) ([]byte, error) { return nil, os.ErrNotExist })
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range files {
			if !strings.HasPrefix(f, classes[labels[i]]+"/") {
				t.Fatalf("file %s labelled %s", f, classes[labels[i]])
			}
			if ds.(*images).Name(i) != f {
				t.Fatalf("file %d is %s, OpenImages' sample %d is %s", i, f, i, ds.(*images).Name(i))
			}
		}
	})
}
