package onnx

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// fuzzSeeds adds small files of the backend test data to the corpus.
func fuzzSeeds(f *testing.F, pattern string, max int) {
	paths, _ := filepath.Glob(filepath.Join(testdataRoot, pattern))
	added := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) > 4096 {
			continue
		}
		f.Add(b)
		if added++; added >= max {
			break
		}
	}
}

// FuzzDecodeModel: Decode never panics, and whatever it accepts validates without
// panicking and survives an encode/decode round trip unchanged.
func FuzzDecodeModel(f *testing.F) {
	f.Add(Encode(smallModel()))
	fuzzSeeds(f, "node/*/model.onnx", 200)
	fuzzSeeds(f, "simple/*/model.onnx", 20)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		_ = m.Validate()
		enc := Encode(m)
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decoding an accepted model: %v", err)
		}
		if !bytes.Equal(Encode(m2), enc) {
			t.Fatalf("model changed in an encode/decode round trip")
		}
	})
}

// FuzzDecodeTensor: DecodeTensor never panics; an accepted tensor holds exactly as many
// elements as its shape says and round-trips unchanged.
func FuzzDecodeTensor(f *testing.F) {
	f.Add(EncodeTensor(&Tensor{Name: "x", DType: Float, Dims: []int64{2}, F32: []float32{1, 2}}))
	fuzzSeeds(f, "node/*/test_data_set_0/input_0.pb", 200)
	f.Fuzz(func(t *testing.T, b []byte) {
		tt, err := DecodeTensor(b)
		if err != nil {
			return
		}
		n, err := NumElements(tt.Dims)
		if err != nil {
			t.Fatalf("accepted tensor with bad dims: %v", err)
		}
		if int64(tt.Len()) != n && ElemSize(tt.DType) != 0 {
			t.Fatalf("tensor %v holds %d elements, shape says %d", tt.Dims, tt.Len(), n)
		}
		enc := EncodeTensor(tt)
		back, err := DecodeTensor(enc)
		if err != nil {
			t.Fatalf("re-decoding an accepted tensor: %v", err)
		}
		if !bytes.Equal(EncodeTensor(back), enc) {
			t.Fatalf("tensor changed in an encode/decode round trip")
		}
	})
}
