package serving

import (
	"encoding/json"
	"testing"
	"time"
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

// BenchmarkMetricsPerRequest is what metrics cost one request: its status and latency at
// the node asked, and its share of a batch of 4 where it ran.
func BenchmarkMetricsPerRequest(b *testing.B) {
	m := NewMetrics()
	rec := batchRecord{model: "lenet5", rows: 4, queued: make([]time.Duration, 4), input: time.Microsecond, infer: 20 * time.Microsecond}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.ObserveRequest("lenet5", 200, 150*time.Microsecond)
		if i%4 == 0 {
			m.observeBatch(rec)
		}
	}
}
