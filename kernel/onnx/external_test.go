package onnx

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// extTensor returns a TensorProto of a float tensor with dims whose data is external,
// with the given external_data entries (key, value pairs).
func extTensor(name string, dims []int64, kv ...string) []byte {
	b := protoTensor(dims, Float)
	b = protowire.AppendTag(b, tensorName, protowire.BytesType)
	b = protowire.AppendString(b, name)
	for i := 0; i+1 < len(kv); i += 2 {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv[i])
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv[i+1])
		b = protowire.AppendTag(b, tensorExternalData, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	b = protowire.AppendTag(b, tensorDataLocation, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

// extModel returns a ModelProto whose graph has the one initializer tensor.
func extModel(tensor []byte) []byte {
	var g []byte
	g = protowire.AppendTag(g, 2, protowire.BytesType)
	g = protowire.AppendString(g, "g")
	g = protowire.AppendTag(g, 5, protowire.BytesType)
	g = protowire.AppendBytes(g, tensor)
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.VarintType)
	m = protowire.AppendVarint(m, 8)
	m = protowire.AppendTag(m, 7, protowire.BytesType)
	return protowire.AppendBytes(m, g)
}

// TestReadFileExternal reads a model saved by python3-onnx with save_as_external_data=True
// (testdata/external/gen.py) and finds the same weights as in the inline copy.
func TestReadFileExternal(t *testing.T) {
	ext, err := ReadFile("testdata/external/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	in, err := ReadFile("testdata/external/inline.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Graph.Initializers) != 2 || !reflect.DeepEqual(ext.Graph.Initializers, in.Graph.Initializers) {
		t.Fatalf("external initializers %+v\ndiffer from inline %+v", ext.Graph.Initializers, in.Graph.Initializers)
	}
	b, err := os.ReadFile("testdata/external/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(b); !errors.Is(err, ErrExternalData) {
		t.Fatalf("Decode of an external-data model: %v, want ErrExternalData", err)
	}
}

func TestExternalErrors(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i)
	}
	outside := filepath.Join(t.TempDir(), "secret.bin")
	for _, f := range []struct {
		path string
		b    []byte
	}{{filepath.Join(dir, "w.bin"), data}, {outside, data}} {
		if err := os.WriteFile(f.path, f.b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		kv   []string
		dims []int64
		want string
	}{
		"ok at offset":       {[]string{"location", "w.bin", "offset", "16", "length", "16"}, []int64{4}, ""},
		"ok to the end":      {[]string{"location", "w.bin", "offset", "48"}, []int64{2, 2}, ""},
		"parent dir":         {[]string{"location", "../w.bin"}, []int64{1}, "not a relative path inside"},
		"absolute":           {[]string{"location", outside}, []int64{1}, "not a relative path inside"},
		"symlink outside":    {[]string{"location", "link.bin", "length", "4"}, []int64{1}, "escapes"},
		"missing file":       {[]string{"location", "nope.bin"}, []int64{1}, "no such file"},
		"directory":          {[]string{"location", "sub", "length", "4"}, []int64{1}, "not a regular file"},
		"past the end":       {[]string{"location", "w.bin", "offset", "60", "length", "8"}, []int64{2}, "past the end"},
		"offset beyond file": {[]string{"location", "w.bin", "offset", "1000"}, []int64{1}, "length"},
		"length mismatch":    {[]string{"location", "w.bin", "length", "12"}, []int64{4}, "needs 16"},
		"negative offset":    {[]string{"location", "w.bin", "offset", "-4"}, []int64{1}, "not a non-negative integer"},
		"huge offset":        {[]string{"location", "w.bin", "offset", "9223372036854775807", "length", "4"}, []int64{1}, "past the end"},
		"unknown key":        {[]string{"location", "w.bin", "colour", "red"}, []int64{1}, "unknown key"},
		"duplicate key":      {[]string{"location", "w.bin", "location", "w.bin"}, []int64{1}, "twice"},
		"no location":        {[]string{"offset", "0"}, []int64{1}, "no location"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".onnx")
			if err := os.WriteFile(p, extModel(extTensor("w", c.dims, c.kv...)), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := ReadFile(p)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				w := m.Graph.Initializers["w"]
				if w == nil || len(w.F32) != int(volume(c.dims)) || w.ext != nil {
					t.Fatalf("tensor %+v", w)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `tensor "w"`) {
				t.Fatalf("error %v, want one naming tensor \"w\" and containing %q", err, c.want)
			}
		})
	}
}

func volume(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

// FuzzReadExternal: the external-data path never panics, never reads outside its folder
// (a file "secret.bin" beside the folder holds bytes 0xEE) and gives a tensor holding
// exactly the elements its shape says.
func FuzzReadExternal(f *testing.F) {
	if b, err := os.ReadFile("testdata/external/model.onnx"); err == nil {
		f.Add(b)
	}
	f.Add(extModel(extTensor("w", []int64{4}, "location", "w.bin", "offset", "16", "length", "16")))
	f.Add(extModel(extTensor("w", []int64{2, 2}, "location", "w.bin", "offset", "48")))
	f.Add(extModel(extTensor("w", []int64{1}, "location", "../secret.bin")))
	f.Add(extModel(extTensor("w", []int64{1}, "location", "link.bin", "length", "4")))
	base := f.TempDir()
	dir := filepath.Join(base, "model")
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i)
	}
	secret := make([]byte, 64)
	for i := range secret {
		secret[i] = 0xEE
	}
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), data, 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), data[:60], 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secret.bin"), secret, 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "secret.bin"), filepath.Join(dir, "link.bin")); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeModel(b)
		if err != nil {
			return
		}
		if err := resolveExternal(m, dir); err != nil {
			return
		}
		_ = walkTensors(m.Graph, func(tt *Tensor) error {
			if tt.ext != nil {
				t.Fatalf("tensor %q left unread", tt.Name)
			}
			n, err := NumElements(tt.Dims)
			if err != nil {
				t.Fatalf("accepted tensor with bad dims: %v", err)
			}
			if int64(tt.Len()) != n && ElemSize(tt.DType) != 0 {
				t.Fatalf("tensor %v holds %d elements", tt.Dims, tt.Len())
			}
			if tt.DType == Float {
				for _, v := range tt.F32 {
					if math.Float32bits(v) == 0xEEEEEEEE {
						t.Fatalf("tensor %q read the secret file outside the folder", tt.Name)
					}
				}
			}
			return nil
		})
	})
}

// TestExternalDataBeyond4GiB reads a tensor stored past 2 GiB and 4 GiB into its data
// file (a sparse file, so the test writes a few bytes): what a model over protobuf's 2 GiB
// limit needs, offsets that do not fit 32 bits.
func TestExternalDataBeyond4GiB(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1.5, -2, 3.25, 1e-3}
	var raw []byte
	for _, v := range want {
		b := math.Float32bits(v)
		raw = append(raw, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
	}
	offsets := []int64{2<<30 + 4, 4<<30 + 8}
	for _, off := range offsets {
		if _, err := f.WriteAt(raw, off); err != nil {
			t.Skipf("cannot write a sparse file at %d here: %v", off, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, off := range offsets {
		p := filepath.Join(dir, "m.onnx")
		tensor := extTensor("w", []int64{4}, "location", "big.bin", "offset", strconv.FormatInt(off, 10), "length", "16")
		if err := os.WriteFile(p, extModel(tensor), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := ReadFile(p)
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if w := m.Graph.Initializers["w"]; w == nil || !reflect.DeepEqual(w.F32, want) {
			t.Fatalf("offset %d: tensor %+v, want %v", off, w, want)
		}
	}
}
