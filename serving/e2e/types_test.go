package e2e

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
)

// intAndBoolTensors serves the zoo's transformer_encoder (INT64 ids and mask) and a small
// model with an INT64 and a BOOL input whose outputs are INT64 and BOOL, on node1, and asks
// node0 (which forwards over rpc): the answers, in JSON and in the binary extension, match
// the kernel run directly, each output in its real datatype.
func intAndBoolTensors(t *testing.T, dir string, httpAddr map[string]string) {
	text := filepath.Join(dir, "text.onnx")
	cli(t, dir, "zoo", "transformer_encoder", "--vocab", "64", "--length", "6", "--layers", "1", "--heads", "2",
		"--width", "16", "--classes", "3", "--seed", "5", "--out", text)
	gate := filepath.Join(dir, "gate.onnx")
	if err := onnx.WriteFile(gate, gateModel()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{text, gate} {
		cli(t, dir, "put", f, "types-"+filepath.Base(f))
	}
	cli(t, dir, "serve", "text", "--sdfs", "types-text.onnx", "--nodes", "node1")
	cli(t, dir, "serve", "gate", "--sdfs", "types-gate.onnx", "--nodes", "node1")
	defer cli(t, dir, "unserve", "text")
	defer cli(t, dir, "unserve", "gate")

	ids := []int64{1, 5, 9, 63, 0, 0, 2, 4, 8, 16, 32, 62}
	mask := []int64{1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}
	in := []*onnx.Tensor{
		{Name: "ids", DType: onnx.Int64, Dims: []int64{2, 6}, I64: ids},
		{Name: "mask", DType: onnx.Int64, Dims: []int64{2, 6}, I64: mask},
	}
	want := direct(t, text, in)
	js := fmt.Sprintf(`{"inputs":[{"name":"ids","shape":[2,6],"datatype":"INT64","data":%s},{"name":"mask","shape":[2,6],"datatype":"INT64","data":%s}]}`,
		jsonOf(ids), jsonOf(mask))
	out := inferJSON(t, httpAddr["node0"]+"/v2/models/text/infer", []byte(js))
	if len(out) != 1 || out[0].Datatype != "FP32" || fmt.Sprint(out[0].Shape) != "[2 3]" {
		t.Fatalf("text: outputs %+v", out)
	}
	for i, v := range out[0].Data {
		f, _ := v.(float64)
		if w := float64(want[0].F32[i]); math.Abs(f-w) > 1e-5*max(1, math.Abs(w)) {
			t.Fatalf("text: logit %d is %v over HTTP, %v from the kernel", i, f, w)
		}
	}
	// The same in the binary extension: ids as raw little-endian INT64.
	var raw []byte
	for _, v := range ids {
		raw = binary.LittleEndian.AppendUint64(raw, uint64(v))
	}
	hdr := fmt.Sprintf(`{"inputs":[{"name":"ids","shape":[2,6],"datatype":"INT64","parameters":{"binary_data_size":%d}},{"name":"mask","shape":[2,6],"datatype":"INT64","data":%s}],"outputs":[{"name":"output","parameters":{"binary_data":true}}]}`,
		len(raw), jsonOf(mask))
	code, b, err := sendBinary(httpAddr["node0"]+"/v2/models/text/infer", []byte(hdr), raw)
	if err != nil || code != 200 {
		t.Fatalf("text binary: %d %s %v", code, b, err)
	}
	if got := binaryF32(t, b); fmt.Sprint(len(got)) != "6" {
		t.Fatalf("text binary: %d floats", len(got))
	} else {
		for i, w := range want[0].F32 {
			if math.Abs(float64(got[i]-w)) > 1e-5*max(1, math.Abs(float64(w))) {
				t.Fatalf("text binary: logit %d is %v, kernel %v", i, got[i], w)
			}
		}
	}

	// gate: kept = ids * keep (INT64), dropped = not keep (BOOL).
	js = `{"inputs":[{"name":"ids","shape":[2,3],"datatype":"INT64","data":[7,-8,9000000000,1,2,3]},` +
		`{"name":"keep","shape":[2,3],"datatype":"BOOL","data":[true,false,true,false,false,true]}]}`
	out = inferJSON(t, httpAddr["node0"]+"/v2/models/gate/infer", []byte(js))
	got := map[string]string{}
	for _, o := range out {
		got[o.Name] = o.Datatype + " " + fmt.Sprint(o.Shape) + " " + string(o.RawData)
	}
	if got["kept"] != "INT64 [2 3] [7,0,9000000000,0,0,3]" || got["dropped"] != "BOOL [2 3] [false,true,false,true,true,false]" {
		t.Fatalf("gate: outputs %q", got)
	}
}

// gateModel has inputs ids (INT64) and keep (BOOL) of shape (N, 3) and outputs kept =
// ids * Cast(keep) (INT64) and dropped = Not(keep) (BOOL).
func gateModel() *onnx.Model {
	vi := func(name string, dt onnx.DataType) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: dt, Dims: []int64{-1, 3}, DimParams: []string{"N", ""}, HasShape: true}
	}
	return &onnx.Model{IRVersion: 8, ProducerName: "idunno-e2e", Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
		Name:    "gate",
		Inputs:  []onnx.ValueInfo{vi("ids", onnx.Int64), vi("keep", onnx.Bool)},
		Outputs: []onnx.ValueInfo{vi("kept", onnx.Int64), vi("dropped", onnx.Bool)},
		Nodes: []*onnx.Node{
			{Name: "cast", OpType: "Cast", Inputs: []string{"keep"}, Outputs: []string{"keep64"},
				Attrs: map[string]*onnx.Attribute{"to": {Name: "to", Type: onnx.AttrInt, I: int64(onnx.Int64)}}},
			{Name: "mul", OpType: "Mul", Inputs: []string{"ids", "keep64"}, Outputs: []string{"kept"}},
			{Name: "not", OpType: "Not", Inputs: []string{"keep"}, Outputs: []string{"dropped"}},
		},
		Initializers: map[string]*onnx.Tensor{},
	}}
}

type outTensor struct {
	Name     string          `json:"name"`
	Datatype string          `json:"datatype"`
	Shape    []int64         `json:"shape"`
	Data     []any           `json:"-"`
	RawData  json.RawMessage `json:"data"`
}

func inferJSON(t *testing.T, url string, body []byte) []outTensor {
	t.Helper()
	code, b, err := post(url, body)
	if err != nil || code != 200 {
		t.Fatalf("%s: %d %s %v", url, code, b, err)
	}
	var r struct {
		Outputs []outTensor `json:"outputs"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v in %s", url, err, b)
	}
	for i := range r.Outputs {
		json.Unmarshal(r.Outputs[i].RawData, &r.Outputs[i].Data)
	}
	return r.Outputs
}

func direct(t *testing.T, path string, in []*onnx.Tensor) []*onnx.Tensor {
	t.Helper()
	m, err := kernel.Load(path, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonOf(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// sendBinary posts a request in the binary tensor extension: the JSON header, then raw.
func sendBinary(url string, hdr, raw []byte) (int, []byte, error) {
	return sendWith(url, append(append([]byte{}, hdr...), raw...), map[string]string{
		"Inference-Header-Content-Length": strconv.Itoa(len(hdr)),
		"Content-Type":                    "application/octet-stream",
	})
}

// binaryF32 reads the one binary FP32 output of a response in the binary extension.
func binaryF32(t *testing.T, b []byte) []float32 {
	t.Helper()
	var r struct {
		Outputs []struct {
			Datatype   string `json:"datatype"`
			Parameters struct {
				Size int `json:"binary_data_size"`
			} `json:"parameters"`
		} `json:"outputs"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&r); err != nil || len(r.Outputs) != 1 || r.Outputs[0].Datatype != "FP32" {
		t.Fatalf("binary response header: %v %+v", err, r)
	}
	rest := b[dec.InputOffset():]
	if len(rest) != r.Outputs[0].Parameters.Size {
		t.Fatalf("binary response: %d bytes after the header, header says %d", len(rest), r.Outputs[0].Parameters.Size)
	}
	f := make([]float32, len(rest)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
	}
	return f
}
