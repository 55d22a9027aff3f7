package dataset

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"os"
	"strings"
	"testing"
)

const fashionImages = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
const fashionLabels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (install Debian's dataset-fashion-mnist: make test-deps)", err)
	}
	return b
}

func gunzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestFashionMNIST(t *testing.T) {
	gz := readFile(t, fashionImages)
	raw := gunzipBytes(t, gz)
	for name, open := range map[string]func() (Dataset, error){
		"gzip":       func() (Dataset, error) { return OpenIDX(bytes.NewReader(gz)) },
		"raw":        func() (Dataset, error) { return OpenIDX(bytes.NewReader(raw)) },
		"bytes":      func() (Dataset, error) { return OpenBytes(raw) },
		"gzip bytes": func() (Dataset, error) { return OpenBytes(gz) },
	} {
		ds, err := open()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ds.Len() != 10000 {
			t.Fatalf("%s: Len = %d, want 10000", name, ds.Len())
		}
		im, err := ds.Sample(9999)
		if err != nil {
			t.Fatal(err)
		}
		if im.H != 28 || im.W != 28 || im.C != 1 || !bytes.Equal(im.U8, raw[16+9999*784:]) {
			t.Fatalf("%s: last sample is %dx%dx%d and differs from the file's last 784 bytes", name, im.H, im.W, im.C)
		}
	}
	labels, err := ReadIDXLabels(bytes.NewReader(readFile(t, fashionLabels)))
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) != 10000 || labels[0] != 9 { // the first test image is an ankle boot (class 9)
		t.Fatalf("labels: %d, first %d", len(labels), labels[0])
	}

	ds, err := Open(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	p := Preprocess{Scale: 1.0 / 255}
	tn, err := Batch(ds, 100, 108, p, []int64{-1, 1, 28, 28})
	if err != nil {
		t.Fatal(err)
	}
	if got := tn.Dims; len(got) != 4 || got[0] != 8 || got[1] != 1 || got[2] != 28 || got[3] != 28 {
		t.Fatalf("dims %v", got)
	}
	for k, v := range tn.F32 {
		if want := float32(raw[16+100*784+k]) * (1.0 / 255); math.Abs(float64(v-want)) > 1e-6 {
			t.Fatalf("value %d = %v, want %v", k, v, want)
		}
	}
	// Flat model: [N,784].
	tf, err := Batch(ds, 100, 108, p, []int64{8, 784})
	if err != nil || len(tf.Dims) != 2 || tf.Dims[1] != 784 || !equalF32(tf.F32, tn.F32) {
		t.Fatalf("flat batch: %v %v", err, tf)
	}
}

// TestFashionMNISTGolden pins the bits of a resized, grey-to-RGB, normalised batch: a change
// here changes every job's results. (When pinned, these values matched PyTorch's
// F.interpolate(bilinear, align_corners=False) followed by the same normalisation within 1e-6.)
func TestFashionMNISTGolden(t *testing.T) {
	ds, err := OpenIDX(bytes.NewReader(readFile(t, fashionImages)))
	if err != nil {
		t.Fatal(err)
	}
	p := Preprocess{Resize: [2]int{224, 224}, GreyToRGB: true, Scale: 1.0 / 255,
		Mean: []float32{0.485, 0.456, 0.406}, Std: []float32{0.229, 0.224, 0.225}}
	var sums []string
	for run := 0; run < 2; run++ {
		tn, err := Batch(ds, 0, 4, p, []int64{-1, 3, 224, 224})
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		binary.Write(h, binary.LittleEndian, tn.F32)
		sums = append(sums, hex.EncodeToString(h.Sum(nil)))
	}
	if sums[0] != sums[1] {
		t.Fatalf("two runs differ: %s %s", sums[0], sums[1])
	}
	const golden = "da7736d44f50cec0263a134cb6f424b74254dce7195a505dc0386d5c0dd9ad85"
	if sums[0] != golden {
		t.Errorf("batch hash %s, want %s", sums[0], golden)
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestBatchFitErrors(t *testing.T) {
	ds, err := OpenIDX(bytes.NewReader(readFile(t, fashionImages)))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		p    Preprocess
		dims []int64
		want string // "" = fits
	}{
		{Preprocess{}, []int64{1, 3, 224, 224}, "--resize 224x224"},
		{Preprocess{Resize: [2]int{224, 224}}, []int64{1, 3, 224, 224}, "--grey-to-rgb"},
		{Preprocess{Resize: [2]int{32, 32}, GreyToRGB: true}, []int64{1, 3, 224, 224}, "--resize 32x32 does not fit"},
		{Preprocess{Resize: [2]int{224, 224}, GreyToRGB: true}, []int64{1, 3, 224, 224}, ""},
		{Preprocess{}, []int64{1, 1, 28, 28}, ""},
		{Preprocess{}, []int64{-1, -1, -1, -1}, ""},
		{Preprocess{}, []int64{1, 28, 28}, ""},
		{Preprocess{}, []int64{1, 100}, "784 values but the model wants 100 features"},
		{Preprocess{GreyToRGB: true}, []int64{1, 1, 28, 28}, "3 channels but the model wants 1"},
		{Preprocess{Mean: []float32{1, 2}}, []int64{1, 1, 28, 28}, "--mean has 2 values for 1 channels"},
		{Preprocess{Std: []float32{0}}, []int64{1, 1, 28, 28}, "non-zero"},
		{Preprocess{}, []int64{1, 2, 3, 4, 5}, "rank 5"},
	}
	for _, c := range cases {
		err := Check(ds, c.p, c.dims)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v %v: %v", c.p, c.dims, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v %v: error %v, want one containing %q", c.p, c.dims, err, c.want)
		case err != nil && !strings.HasPrefix(err.Error(), "dataset: "):
			t.Errorf("error without prefix: %v", err)
		}
	}
	if _, err := Batch(ds, 9990, 10001, Preprocess{}, []int64{1, 1, 28, 28}); err == nil {
		t.Error("batch past the end accepted")
	}
}

func TestResizeBilinear(t *testing.T) {
	// PyTorch: F.interpolate(tensor([[0,1],[2,3]]), size=(4,4), mode="bilinear", align_corners=False)
	want := []float32{0, 0.25, 0.75, 1, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2, 2.25, 2.75, 3}
	var buf bytes.Buffer
	if err := WriteNPY(&buf, []int{1, 2, 2}, []float32{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	ds, err := OpenNPY(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := Batch(ds, 0, 1, Preprocess{Resize: [2]int{4, 4}}, []int64{1, 1, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Abs(float64(tn.F32[i]-want[i])) > 1e-6 {
			t.Fatalf("resized %v, want %v", tn.F32, want)
		}
	}
	// Downscaling 4x4 -> 2x2 with half-pixel centres averages the middle of each 2x2 block.
	buf.Reset()
	WriteNPY(&buf, []int{1, 4, 4}, []uint8{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30})
	ds, _ = OpenNPY(&buf)
	tn, err = Batch(ds, 0, 1, Preprocess{Resize: [2]int{2, 2}}, []int64{1, 1, 2, 2})
	if err != nil || !equalF32(tn.F32, []float32{5, 9, 21, 25}) {
		t.Fatalf("downscaled %v %v", tn, err)
	}
}

func TestNPYLayouts(t *testing.T) {
	// Two 2x5 RGB images; channels-last and channels-first files of the same data must give
	// the same batch, and float64/float32/uint8 of the same values too.
	const n, h, w, c = 2, 2, 5, 3
	hwc := make([]uint8, n*h*w*c)
	for i := range hwc {
		hwc[i] = uint8(i * 7)
	}
	chw := make([]uint8, len(hwc))
	for s := 0; s < n; s++ {
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				for ch := 0; ch < c; ch++ {
					chw[s*h*w*c+ch*h*w+y*w+x] = hwc[s*h*w*c+(y*w+x)*c+ch]
				}
			}
		}
	}
	f32, f64 := make([]float32, len(hwc)), make([]float64, len(hwc))
	for i, v := range hwc {
		f32[i], f64[i] = float32(v), float64(v)
	}
	for _, p := range []Preprocess{
		{Scale: 1.0 / 255, Mean: []float32{0.5}, Std: []float32{0.25, 0.5, 1}},
		{Resize: [2]int{3, 7}, Scale: 1.0 / 255, Mean: []float32{0.5}, Std: []float32{0.25, 0.5, 1}},
	} {
		npyLayouts(t, p, hwc, chw, f32, f64)
	}
}

func npyLayouts(t *testing.T, p Preprocess, hwc, chw []uint8, f32 []float32, f64 []float64) {
	const n, h, w, c = 2, 2, 5, 3
	oh, ow := h, w
	if p.Resize[0] > 0 {
		oh, ow = p.Resize[0], p.Resize[1]
	}
	chwF32 := make([]float32, len(chw))
	for i, v := range chw {
		chwF32[i] = float32(v)
	}
	var ref []float32
	for _, in := range []struct {
		shape []int
		data  any
	}{
		{[]int{n, h, w, c}, hwc},
		{[]int{n, c, h, w}, chw},
		{[]int{n, h, w, c}, f32},
		{[]int{n, h, w, c}, f64},
		{[]int{n, c, h, w}, chwF32},
	} {
		var buf bytes.Buffer
		if err := WriteNPY(&buf, in.shape, in.data); err != nil {
			t.Fatal(err)
		}
		ds, err := Open(&buf)
		if err != nil {
			t.Fatalf("%v %T: %v", in.shape, in.data, err)
		}
		tn, err := Batch(ds, 0, 2, p, []int64{-1, 3, int64(oh), int64(ow)})
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = tn.F32
			if p.Resize[0] > 0 {
				continue
			}
			// Spot check: sample 1, channel 2, pixel (1,4) = (hwc/255 - 0.5) / 1.
			v := hwc[1*h*w*c+(1*w+4)*c+2]
			if got, want := tn.F32[1*c*h*w+2*h*w+1*w+4], float32(v)/255-0.5; math.Abs(float64(got-want)) > 1e-6 {
				t.Fatalf("got %v, want %v", got, want)
			}
			continue
		}
		for i := range ref {
			if math.Abs(float64(ref[i]-tn.F32[i])) > 1e-6 {
				t.Fatalf("%v %T differs at %d: %v vs %v", in.shape, in.data, i, tn.F32[i], ref[i])
			}
		}
	}
}

func npyWithHeader(hdr string, body []byte) []byte {
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(hdr)), byte(len(hdr)>>8))
	return append(append(b, hdr...), body...)
}

func TestNPYRejects(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want string
	}{
		"fortran":  {npyWithHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 2), }", make([]byte, 16)), "Fortran"},
		"pickle":   {npyWithHeader("{'descr': '|O', 'fortran_order': False, 'shape': (1, 2, 2), }", make([]byte, 32)), "pickles"},
		"int32":    {npyWithHeader("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 2), }", make([]byte, 16)), "not supported"},
		"truncate": {npyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 2), }", make([]byte, 3)), "truncated"},
		"trailing": {npyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 2), }", make([]byte, 5)), "trailing"},
		"huge":     {npyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (4000000000, 4000, 4000), }", nil), "limit"},
		"rank5":    {npyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1), }", []byte{0}), "not supported"},
		"nochan":   {npyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 8, 8, 8), }", nil), "channel"},
		"struct":   {npyWithHeader("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", nil), "structured"},
		"garbage":  {npyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 2)", nil), "header"},
		"magic":    {[]byte("\x93NUMPX\x01\x00\x00\x00"), "unknown format"},
	}
	for name, c := range cases {
		_, err := Open(bytes.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "dataset: ") {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
}

func idxFile(typ byte, dims []uint32, body []byte) []byte {
	b := []byte{0, 0, typ, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, body...)
}

func TestIDXRejects(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want string
	}{
		"huge":     {idxFile(0x08, []uint32{0xffffffff, 0xffffffff, 0xffffffff}, nil), "limit"},
		"huge2":    {idxFile(0x0E, []uint32{100000, 1000, 1000}, nil), "limit"},
		"truncate": {idxFile(0x08, []uint32{2, 2, 2}, make([]byte, 7)), "truncated"},
		"trailing": {idxFile(0x08, []uint32{2, 2, 2}, make([]byte, 9)), "trailing"},
		"type":     {idxFile(0x07, []uint32{2, 2, 2}, make([]byte, 8)), "element type"},
		"labels":   {idxFile(0x08, []uint32{2}, make([]byte, 2)), "labels"},
		"zero":     {idxFile(0x08, []uint32{2, 0, 2}, nil), "bad shape"},
		"short":    {[]byte{0, 0, 8}, "short header"},
	}
	for name, c := range cases {
		_, err := OpenIDX(bytes.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "dataset: ") {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
	// Big-endian float IDX is read as float32.
	body := binary.BigEndian.AppendUint32(nil, math.Float32bits(1.5))
	body = binary.BigEndian.AppendUint32(body, math.Float32bits(-2))
	ds, err := OpenIDX(bytes.NewReader(idxFile(0x0D, []uint32{1, 1, 2}, body)))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := ds.Sample(0)
	if im.F32[0] != 1.5 || im.F32[1] != -2 {
		t.Fatalf("float idx: %v", im.F32)
	}
}

func TestImagesFolder(t *testing.T) {
	enc := func(img image.Image, jpg bool) []byte {
		var buf bytes.Buffer
		var err error
		if jpg {
			err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 100})
		} else {
			err = png.Encode(&buf, img)
		}
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	rgb := image.NewNRGBA(image.Rect(0, 0, 6, 4))
	grey := image.NewGray(image.Rect(0, 0, 6, 4))
	for y := 0; y < 4; y++ {
		for x := 0; x < 6; x++ {
			rgb.SetNRGBA(x, y, color.NRGBA{uint8(10 * x), uint8(20 * y), 200, 255})
			grey.SetGray(x, y, color.Gray{uint8(10*x + 50*y)})
		}
	}
	files := map[string][]byte{
		"set/b.png":  enc(rgb, false),
		"set/a.jpg":  enc(rgb, true),
		"set/c.png":  enc(grey, false),
		"set/d.jpeg": enc(grey, true),
	}
	opened := 0
	open := func(name string) ([]byte, error) {
		opened++
		b, ok := files[name]
		if !ok {
			return nil, os.ErrNotExist
		}
		return b, nil
	}
	ds, err := OpenImages([]string{"set/d.jpeg", "set/c.png", "set/b.png", "set/a.jpg"}, open)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		name string
		c    int
	}{{"set/a.jpg", 3}, {"set/b.png", 3}, {"set/c.png", 1}, {"set/d.jpeg", 1}} {
		if got := ds.(*images).Name(i); got != want.name {
			t.Fatalf("sample %d is %s, want %s", i, got, want.name)
		}
		im, err := ds.Sample(i)
		if err != nil {
			t.Fatal(err)
		}
		if im.H != 4 || im.W != 6 || im.C != want.c {
			t.Fatalf("%s: %dx%dx%d", want.name, im.H, im.W, im.C)
		}
		// PNG exact, JPEG within a few levels.
		tol := 0
		if strings.Contains(want.name, "jp") {
			tol = 12
		}
		for y := 0; y < 4; y++ {
			for x := 0; x < 6; x++ {
				for ch := 0; ch < im.C; ch++ {
					var exp int
					if im.C == 3 {
						exp = int([]uint8{uint8(10 * x), uint8(20 * y), 200}[ch])
					} else {
						exp = 10*x + 50*y
					}
					if d := int(im.U8[(y*6+x)*im.C+ch]) - exp; d > tol || d < -tol {
						t.Fatalf("%s (%d,%d,%d) = %d, want %d", want.name, y, x, ch, im.U8[(y*6+x)*im.C+ch], exp)
					}
				}
			}
		}
	}
	// Mixed grey and colour files need --grey-to-rgb.
	if _, err := Batch(ds, 0, 4, Preprocess{}, []int64{-1, 3, 4, 6}); err == nil || !strings.Contains(err.Error(), "--grey-to-rgb") {
		t.Fatalf("mixed channels: %v", err)
	}
	tn, err := Batch(ds, 0, 4, Preprocess{GreyToRGB: true}, []int64{-1, 3, 4, 6})
	if err != nil {
		t.Fatal(err)
	}
	plane := 24
	if s := tn.F32[2*3*plane:]; !equalF32(s[:plane], s[plane:2*plane]) || !equalF32(s[:plane], s[2*plane:3*plane]) {
		t.Fatal("grey-to-rgb channels differ")
	}
	if _, err := OpenImages([]string{"x.png", "x.png"}, open); err == nil {
		t.Fatal("duplicate names accepted")
	}
	bad, _ := OpenImages([]string{"set/missing.png"}, open)
	if _, err := bad.Sample(0); err == nil || !strings.Contains(err.Error(), "set/missing.png") {
		t.Fatalf("missing file: %v", err)
	}
	files["set/junk.png"] = []byte("\x89PNG\r\n\x1a\nnot really")
	bad, _ = OpenImages([]string{"set/junk.png"}, open)
	if _, err := bad.Sample(0); err == nil || !strings.HasPrefix(err.Error(), "dataset: set/junk.png: decode") {
		t.Fatalf("corrupt file: %v", err)
	}
}

func TestDetect(t *testing.T) {
	var npy bytes.Buffer
	WriteNPY(&npy, []int{1, 2}, []uint8{1, 2})
	gz := readFile(t, fashionImages)
	cases := []struct {
		name string
		head []byte
		want Format
	}{
		{"x.bin", npy.Bytes()[:16], FormatNPY},
		{"t10k-images-idx3-ubyte.gz", gz[:512], FormatIDX},
		{"t10k-images-idx3-ubyte", gunzipBytes(t, gz)[:16], FormatIDX},
		{"a.dat", []byte("\x89PNG\r\n\x1a\n...."), FormatImage},
		{"a.dat", []byte{0xff, 0xd8, 0xff, 0xe0}, FormatImage},
		{"data.npy", nil, FormatNPY},
		{"pic.JPG", nil, FormatImage},
	}
	for _, c := range cases {
		if got, err := Detect(c.name, c.head); got != c.want || err != nil {
			t.Errorf("Detect(%s) = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if _, err := Detect("notes.txt", []byte("hello")); err == nil {
		t.Error("text detected as a dataset")
	}
}

func TestFlags(t *testing.T) {
	var p Preprocess
	fs := flag.NewFlagSet("job", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.Flags(fs)
	err := fs.Parse([]string{"--resize", "224x200", "--grey-to-rgb", "--mean", "0.485,0.456,0.406", "--std", "0.229, 0.224, 0.225", "--scale", "1/255"})
	if err != nil {
		t.Fatal(err)
	}
	want := Preprocess{Resize: [2]int{224, 200}, GreyToRGB: true, Mean: []float32{0.485, 0.456, 0.406},
		Std: []float32{0.229, 0.224, 0.225}, Scale: float32(1.0 / 255)}
	if p.String() != want.String() || p.Resize != want.Resize || p.Scale != want.Scale {
		t.Fatalf("parsed %q, want %q", p.String(), want.String())
	}
	// String round-trips through the flags.
	var q Preprocess
	fs2 := flag.NewFlagSet("job", flag.ContinueOnError)
	q.Flags(fs2)
	if err := fs2.Parse(strings.Fields(p.String())); err != nil || q.String() != p.String() {
		t.Fatalf("round trip: %v %q", err, q.String())
	}
	for _, bad := range [][]string{{"--resize", "224"}, {"--resize", "0x4"}, {"--mean", "a,b"}, {"--scale", "1/0"}, {"--mean", "1,2,3,4,5"}} {
		var r Preprocess
		fs := flag.NewFlagSet("job", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		r.Flags(fs)
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestWriteIDXRoundTrip(t *testing.T) {
	data := make([]uint8, 3*4*5)
	for i := range data {
		data[i] = uint8(i)
	}
	var buf bytes.Buffer
	if err := WriteIDX(&buf, []int{3, 4, 5}, data); err != nil {
		t.Fatal(err)
	}
	ds, err := OpenBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	im, _ := ds.Sample(2)
	if ds.Len() != 3 || im.H != 4 || im.W != 5 || !bytes.Equal(im.U8, data[40:]) {
		t.Fatalf("round trip: %d samples, %dx%d", ds.Len(), im.H, im.W)
	}
	buf.Reset()
	WriteIDX(&buf, []int{3}, []uint8{7, 8, 9})
	if l, err := ReadIDXLabels(&buf); err != nil || !bytes.Equal(l, []uint8{7, 8, 9}) {
		t.Fatalf("labels: %v %v", l, err)
	}
	if err := WriteIDX(&buf, []int{2, 2}, []uint8{1}); err == nil {
		t.Fatal("short data accepted")
	}
}

// TestGunzipBounded: Gunzip returns a gzip file's content, and refuses content past
// MaxFileBytes (a small file that expands without bound) and bytes that are not gzip.
func TestGunzipBounded(t *testing.T) {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(make([]byte, 5000))
	zw.Close()
	if out, err := Gunzip(zb.Bytes()); err != nil || len(out) != 5000 {
		t.Fatalf("Gunzip: %d bytes, %v", len(out), err)
	}
	old := MaxFileBytes
	MaxFileBytes = 4999
	defer func() { MaxFileBytes = old }()
	if _, err := Gunzip(zb.Bytes()); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("content past the limit: %v", err)
	}
	if _, err := Gunzip([]byte("not gzip")); err == nil {
		t.Fatal("Gunzip of bytes that are not gzip succeeded")
	}
}
