package httpapi

import (
	"bytes"
	"encoding/json"
	"testing"
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
	})
}

// FuzzDecodeTensors feeds arbitrary rpc tensor headers and bodies to the forwarding decoder.
func FuzzDecodeTensors(f *testing.F) {
	f.Add([]byte(`[{"name":"x","dtype":1,"dims":[1,2]}]`), []byte{0, 0, 128, 63, 0, 0, 0, 64})
	f.Add([]byte(`[{"name":"x","dtype":7,"dims":[1]},{"name":"y","dtype":9,"dims":[2]}]`), make([]byte, 10))
	f.Add([]byte(`[{"name":"x","dtype":1,"dims":[4294967296,4294967296]}]`), []byte{})
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
