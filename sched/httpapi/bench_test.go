package httpapi

import (
	"encoding/json"
	"testing"
)

func lenetJSON() []byte {
	img := make([]float32, 784)
	for i := range img {
		img[i] = float32(i%29) / 29
	}
	d, _ := json.Marshal(img)
	return []byte(`{"inputs":[{"name":"input","shape":[1,1,28,28],"datatype":"FP32","data":` + string(d) + `}]}`)
}

func BenchmarkDecodeInferRequestJSON(b *testing.B) {
	body := lenetJSON()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := DecodeInferRequest(body, -1, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
