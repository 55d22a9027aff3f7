package onnx_test

import (
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// BenchmarkDecodeResNet50 measures decoding a 102 MB model (go test -bench Decode ./kernel/onnx).
func BenchmarkDecodeResNet50(b *testing.B) {
	m, err := zoo.Build("resnet50", zoo.Options{})
	if err != nil {
		b.Fatal(err)
	}
	enc := onnx.Encode(m)
	b.SetBytes(int64(len(enc)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := onnx.Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResNet50 measures encoding the same model.
func BenchmarkEncodeResNet50(b *testing.B) {
	m, err := zoo.Build("resnet50", zoo.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(onnx.Encode(m))))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		onnx.Encode(m)
	}
}
