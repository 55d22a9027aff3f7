package serving

import (
	"strings"
	"testing"
)

func TestScannerReadsTheRequestShape(t *testing.T) {
	body := `{"id":"a\"b\\c\/\u00e9\ud83d\ude00","unknown":{"deep":[1,{"x":null}],"s":"]}"},
		"parameters":{"binary_data_output":true,"other":[1,2]},
		"inputs":[{"data":[1.5,-2e3],"datatype":"FP32","shape":[2],"extra":false,"name":"x"}],
		"outputs":[{"name":"y","parameters":{"binary_data":false}}]}`
	req, err := DecodeInferRequest([]byte(body), -1, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != "a\"b\\c/é😀" || !req.BinaryOutput || len(req.Inputs) != 1 || len(req.Outputs) != 1 || req.Outputs[0].Name != "y" {
		t.Fatalf("decoded %+v", req)
	}
	in := req.Inputs[0]
	if in.Name != "x" || len(in.F32) != 2 || in.F32[0] != 1.5 || in.F32[1] != -2000 {
		t.Fatalf("input %+v", in)
	}
	// A repeated member replaces the earlier one.
	req, err = DecodeInferRequest([]byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]}],
		"inputs":[{"name":"b","shape":[1],"datatype":"FP32","data":[2]}]}`), -1, Limits{})
	if err != nil || len(req.Inputs) != 1 || req.Inputs[0].Name != "b" {
		t.Fatalf("repeated inputs: %+v %v", req, err)
	}
}

func TestScannerRejectsBadJSON(t *testing.T) {
	good := `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`
	for _, body := range []string{
		``, ` `, `null`, `[]`, `"x"`, `{`, `{"inputs"}`, `{"inputs":}`, `{"inputs":[}`,
		good + `x`, good + `{}`, `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[01]}]}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1.]}]}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[-]}]}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1,]}]}`,
		`{"inputs":[{"name":"x","shape":[1.5],"datatype":"FP32","data":[1]}]}`,
		`{"inputs":[{"name":"x\u","shape":[1],"datatype":"FP32","data":[1]}]}`,
		`{"inputs":[{"name":"x` + "\x01" + `","shape":[1],"datatype":"FP32","data":[1]}]}`,
		`{"id":"\q","inputs":[]}`, `{"id":tru,"inputs":[]}`, `{'id':1}`, `{"a":1 "b":2}`,
		`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		if _, err := DecodeInferRequest([]byte(body), -1, Limits{}); err == nil || !IsBadRequest(err) {
			t.Errorf("%q: accepted (%v)", body, err)
		}
	}
	if _, err := DecodeInferRequest([]byte(" \n"+good+"\t "), -1, Limits{}); err != nil {
		t.Errorf("whitespace around the body: %v", err)
	}
}
