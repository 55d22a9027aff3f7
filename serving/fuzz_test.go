package serving

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"idunno/kernel/onnx"
)

// FuzzDecodeInferRequest feeds arbitrary bodies and header lengths to the request decoder:
// it must never panic, must respect the limits, and what it accepts must be consistent.
func FuzzDecodeInferRequest(f *testing.F) {
	f.Add([]byte(`{"id":"a","inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[2,2],"datatype":"INT64","data":[[1,2],[3,4]]}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"b","shape":[3],"datatype":"BOOL","data":[true,false,1]}]}`), -1)
	f.Add(append([]byte(`{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}`), 0, 0, 128, 63, 0, 0, 0, 64), 84)
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[1e9,1e9],"datatype":"UINT8","data":[]}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"FP64","data":[[[[[1]]]]]}]}`), 3)
	f.Add([]byte(`{"id":"\u00e9\ud83d\ude00\n","x":{"y":[null,true,-0.5e-3]},"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[-7],"z":"q"}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"h","shape":[3],"datatype":"FP16","data":[1.5,-65504,6e-8]},{"name":"b","shape":[1],"datatype":"BF16","data":[3.1]}],"parameters":{"timeout":5000,"priority":1}}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"u","shape":[2],"datatype":"UINT64","data":[18446744073709551615,0]},{"name":"s","shape":[2,1],"datatype":"BYTES","data":[["1.5"],["x\"y"]]}]}`), -1)
	f.Add(append([]byte(`{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":10}},{"name":"h","shape":[1],"datatype":"FP16","parameters":{"binary_data_size":2}}]}`),
		1, 0, 0, 0, '7', 1, 0, 0, 0, '8', 0x00, 0x3c), 143)
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"UINT16","data":[65536]},{"name":"y","shape":[1],"datatype":"UINT32","data":[4294967295]}]}`), -1)
	lim := Limits{MaxBodyBytes: 1 << 16, MaxElements: 1 << 12}
	f.Fuzz(func(t *testing.T, body []byte, headerLen int) {
		req, err := DecodeInferRequest(body, headerLen, lim)
		if err == nil {
			js := body
			if headerLen >= 0 {
				js = body[:headerLen]
			}
			if !json.Valid(js) {
				t.Fatalf("accepted a header that is not valid JSON: %q", js)
			}
		}
		if err != nil {
			if !IsBadRequest(err) {
				t.Fatalf("decode error is not a bad request: %v", err)
			}
			return
		}
		if len(req.Inputs) == 0 || len(req.Inputs) > DefaultLimits.MaxInputs {
			t.Fatalf("accepted %d inputs", len(req.Inputs))
		}
		for _, in := range req.Inputs {
			n := 1
			for _, d := range in.Dims {
				if d < 0 {
					t.Fatalf("negative dimension accepted: %v", in.Dims)
				}
				n *= int(d)
			}
			if n > lim.MaxElements || elements(in) != n {
				t.Fatalf("input %q: shape %v, %d elements", in.Name, in.Dims, elements(in))
			}
		}
		// What was accepted encodes to valid JSON.
		js, _ := EncodeInferResponse(nil, "m", req.ID, req.Inputs, func(i int) bool { return i%2 == 1 })
		if !json.Valid(js) {
			t.Fatalf("response is not JSON: %s", js)
		}
		// Conversion to any model datatype keeps the element count or is a 400.
		for _, in := range req.Inputs {
			for _, want := range []onnx.DataType{onnx.Float, onnx.Double, onnx.Int64, onnx.Int32, onnx.Uint8, onnx.Bool, onnx.Float16} {
				c, err := convertTensor(in, want)
				if err != nil {
					if !IsBadRequest(err) {
						t.Fatalf("convert %s to %s: not a bad request: %v", DatatypeName(in.DType), DatatypeName(want), err)
					}
					continue
				}
				if c.DType != want || elements(c) != elements(in) {
					t.Fatalf("convert %s to %s: %d elements became %d", DatatypeName(in.DType), DatatypeName(want), elements(in), elements(c))
				}
			}
		}
	})
}

// FuzzDecodeBody feeds arbitrary bodies and Content-Encodings to the body decoder: never
// more than the limit out, errors are 400, 413 or 415, gzip and deflate (zlib) of anything
// decode to it.
func FuzzDecodeBody(f *testing.F) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"inputs":[]}`))
	zw.Close()
	f.Add([]byte("gzip"), gz.Bytes())
	f.Add([]byte("identity"), []byte("x"))
	f.Add([]byte("br"), []byte("x"))
	var zl bytes.Buffer
	zlw := zlib.NewWriter(&zl)
	zlw.Write([]byte(`{"inputs":[]}`))
	zlw.Close()
	f.Add([]byte("deflate"), zl.Bytes())
	f.Add([]byte("deflate"), []byte{0x78, 0x9c, 3, 0})
	f.Add([]byte("gzip"), []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	const limit = 1 << 12
	f.Fuzz(func(t *testing.T, enc, body []byte) {
		out, err := DecodeBody(enc, body, limit)
		if err != nil {
			if !IsBadRequest(err) && !errors.Is(err, errBodyTooLarge) && !errors.Is(err, errBadEncoding) {
				t.Fatalf("unexpected error kind: %v", err)
			}
		} else if len(out) > limit && len(enc) > 0 && !bytes.EqualFold(enc, []byte("identity")) {
			t.Fatalf("decoded %d bytes past the limit", len(out))
		}
		if len(body) <= limit {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(body)
			zw.Close()
			if got, err := DecodeBody([]byte("gzip"), buf.Bytes(), limit); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("gzip round trip: %v", err)
			}
			buf.Reset()
			zlw := zlib.NewWriter(&buf)
			zlw.Write(body)
			zlw.Close()
			if got, err := DecodeBody([]byte("deflate"), buf.Bytes(), limit); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("deflate round trip: %v", err)
			}
		}
	})
}

// FuzzRepositoryRequests feeds arbitrary bodies to the index and load decoders: errors are
// 400s, and an accepted policy is within its bounds.
func FuzzRepositoryRequests(f *testing.F) {
	f.Add([]byte(`{"ready":true}`))
	f.Add([]byte(`{"parameters":{"config":"{\"max_batch_size\":8,\"dynamic_batching\":{\"max_queue_delay_microseconds\":100,\"default_queue_policy\":{\"max_queue_size\":4}},\"instance_group\":[{\"count\":2}]}"}}`))
	f.Add([]byte(`{"parameters":{"unload_dependents":true}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := DecodeIndexRequest(body); err != nil && !IsBadRequest(err) {
			t.Fatalf("index: %v", err)
		}
		p, err := DecodeLoadRequest(body)
		if err != nil {
			if !IsBadRequest(err) {
				t.Fatalf("load: %v", err)
			}
			return
		}
		m := p.Apply(ServedModel{Name: "m", Batch: BatchConfig{MaxBatch: 1, MaxQueue: 1}, Instances: 1})
		if m.Batch.MaxBatch < 1 || m.Batch.MaxBatch > 1024 || m.Batch.MaxQueue < 1 || m.Batch.MaxQueue > 65536 ||
			m.Instances < 1 || m.Instances > 64 || m.Batch.MaxDelay < 0 || m.Batch.MaxDelay > 10*time.Second {
			t.Fatalf("policy out of bounds: %+v", m)
		}
	})
}

// FuzzDecodeTensors feeds arbitrary rpc tensor headers and bodies to the forwarding decoder.
func FuzzDecodeTensors(f *testing.F) {
	f.Add([]byte(`[{"name":"x","dtype":1,"dims":[1,2]}]`), []byte{0, 0, 128, 63, 0, 0, 0, 64})
	f.Add([]byte(`[{"name":"x","dtype":7,"dims":[1]},{"name":"y","dtype":9,"dims":[2]}]`), make([]byte, 10))
	f.Add([]byte(`[{"name":"x","dtype":1,"dims":[4294967296,4294967296]}]`), []byte{})
	f.Add([]byte(`[{"name":"h","dtype":10,"dims":[2]},{"name":"u","dtype":13,"dims":[1]},{"name":"b","dtype":16,"dims":[1]},{"name":"w","dtype":4,"dims":[1]}]`), make([]byte, 16))
	f.Fuzz(func(t *testing.T, hdr, body []byte) {
		var hs []wireTensor
		if json.Unmarshal(hdr, &hs) != nil {
			return
		}
		ts, err := decodeTensors(hs, body, Limits{MaxElements: 1 << 12})
		if err != nil {
			return
		}
		h2, b2 := encodeTensors(ts) // BOOL bytes normalise to 0/1, so compare a second round
		ts2, err := decodeTensors(h2, b2, Limits{MaxElements: 1 << 12})
		if err != nil {
			t.Fatalf("re-decoding an encoding failed: %v", err)
		}
		if h3, b3 := encodeTensors(ts2); len(h3) != len(hs) || string(b3) != string(b2) {
			t.Fatalf("round trip changed the tensors")
		}
	})
}

// FuzzBearerToken feeds arbitrary Authorization values to the header parser: it must never
// panic, and a token it accepts is non-empty and the tail of the value.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x", "Basic dXNlcg==", "Bearer", "Bearer \x00", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, h []byte) {
		tok, ok := BearerToken(h)
		if ok && (len(tok) == 0 || !bytes.HasSuffix(h, tok) || len(tok) > len(h)-len("bearer ")) {
			t.Fatalf("BearerToken(%q) = %q", h, tok)
		}
		if !ok && tok != nil {
			t.Fatalf("BearerToken(%q) refused but returned %q", h, tok)
		}
	})
}
