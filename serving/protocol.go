package serving

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"idunno/kernel/onnx"
)

// Limits bound what one request may ask of the server. Every field has a default
// (DefaultLimits); a zero field means the default.
type Limits struct {
	MaxBodyBytes int // whole HTTP body, JSON header plus binary section
	MaxInputs    int // tensors in one request
	MaxRank      int // dimensions of one tensor
	MaxElements  int // elements of one tensor
	MaxNameLen   int // bytes of a tensor name or request id
}

// DefaultLimits are the limits a server uses unless its Config says otherwise.
var DefaultLimits = Limits{
	MaxBodyBytes: 32 << 20,
	MaxInputs:    16,
	MaxRank:      8,
	MaxElements:  8 << 20,
	MaxNameLen:   256,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxBodyBytes > 0 {
		d.MaxBodyBytes = l.MaxBodyBytes
	}
	if l.MaxInputs > 0 {
		d.MaxInputs = l.MaxInputs
	}
	if l.MaxRank > 0 {
		d.MaxRank = l.MaxRank
	}
	if l.MaxElements > 0 {
		d.MaxElements = l.MaxElements
	}
	if l.MaxNameLen > 0 {
		d.MaxNameLen = l.MaxNameLen
	}
	return d
}

// InferRequest is a decoded POST /v2/models/{name}/infer body. Inputs hold their data in
// the onnx.Tensor field their element type selects; Outputs lists what the client asked
// for (empty: every output, in JSON unless BinaryOutput).
type InferRequest struct {
	ID           string
	Inputs       []*onnx.Tensor
	Outputs      []RequestedOutput
	BinaryOutput bool          // request-level "binary_data_output" parameter
	Timeout      time.Duration // request-level "timeout" parameter (given in µs; 0: none)
	Priority     uint64        // request-level "priority" parameter (1 highest; 0: the default)
}

// RequestedOutput is one entry of the request's "outputs" list.
type RequestedOutput struct {
	Name   string
	Binary bool // "binary_data": true in the output's parameters
}

// BadRequestError is a client mistake: the server answers 400 with its message.
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

func badf(format string, args ...any) error {
	return &BadRequestError{Msg: "serving: " + fmt.Sprintf(format, args...)}
}

// IsBadRequest reports whether err is the client's fault.
func IsBadRequest(err error) bool {
	var b *BadRequestError
	return errors.As(err, &b)
}

type wireParams map[string]json.RawMessage

type wireInput struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters wireParams      `json:"parameters"`
	Data       json.RawMessage `json:"data"`
}

type wireOutput struct {
	Name       string     `json:"name"`
	Parameters wireParams `json:"parameters"`
}

type wireRequest struct {
	ID         string       `json:"id"`
	Parameters wireParams   `json:"parameters"`
	Inputs     []wireInput  `json:"inputs"`
	Outputs    []wireOutput `json:"outputs"`
}

// DecodeInferRequest decodes an infer body. headerLen is the value of the
// Inference-Header-Content-Length header, or -1 when it is absent (the whole body is JSON).
// Every count, size and shape is checked against lim before anything is allocated for it.
func DecodeInferRequest(body []byte, headerLen int, lim Limits) (*InferRequest, error) {
	lim = lim.withDefaults()
	if len(body) > lim.MaxBodyBytes {
		return nil, badf("body of %d bytes exceeds the limit of %d", len(body), lim.MaxBodyBytes)
	}
	js, bin := body, []byte(nil)
	if headerLen >= 0 {
		if headerLen == 0 || headerLen > len(body) {
			return nil, badf("Inference-Header-Content-Length %d does not fit a body of %d bytes", headerLen, len(body))
		}
		js, bin = body[:headerLen], body[headerLen:]
	}
	w, err := parseRequest(js, lim)
	if err != nil {
		if IsBadRequest(err) {
			return nil, err
		}
		return nil, badf("%v", err)
	}
	if len(w.ID) > lim.MaxNameLen {
		return nil, badf("id longer than %d bytes", lim.MaxNameLen)
	}
	if len(w.Inputs) == 0 {
		return nil, badf("request has no inputs")
	}
	if len(w.Inputs) > lim.MaxInputs || len(w.Outputs) > lim.MaxInputs {
		return nil, badf("more than %d inputs or outputs", lim.MaxInputs)
	}
	req := &InferRequest{ID: w.ID}
	if req.BinaryOutput, err = boolParam(w.Parameters, "binary_data_output"); err != nil {
		return nil, err
	}
	us, _, err := uintParam(w.Parameters, "timeout")
	if err != nil {
		return nil, err
	}
	req.Timeout = time.Duration(min(us, uint64(math.MaxInt64/1000))) * time.Microsecond
	if req.Priority, _, err = uintParam(w.Parameters, "priority"); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	off := 0
	for i := range w.Inputs {
		t, used, err := decodeInput(&w.Inputs[i], bin[off:], lim)
		if err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, badf("input %q given twice", t.Name)
		}
		seen[t.Name] = true
		off += used
		req.Inputs = append(req.Inputs, t)
	}
	if off != len(bin) {
		return nil, badf("binary section has %d bytes, inputs use %d", len(bin), off)
	}
	for _, o := range w.Outputs {
		if o.Name == "" || len(o.Name) > lim.MaxNameLen {
			return nil, badf("requested output has an empty or overlong name")
		}
		b, err := boolParam(o.Parameters, "binary_data")
		if err != nil {
			return nil, err
		}
		req.Outputs = append(req.Outputs, RequestedOutput{Name: o.Name, Binary: b})
	}
	return req, nil
}

// decodeInput checks one input and fills its tensor from JSON data or from the front of
// bin; it returns how many bytes of bin it used.
func decodeInput(in *wireInput, bin []byte, lim Limits) (*onnx.Tensor, int, error) {
	if in.Name == "" || len(in.Name) > lim.MaxNameLen {
		return nil, 0, badf("input name is empty or longer than %d bytes", lim.MaxNameLen)
	}
	dt, ok := dtypeByName[in.Datatype]
	if !ok {
		return nil, 0, badf("input %q: unsupported datatype %q", in.Name, in.Datatype)
	}
	if len(in.Shape) == 0 || len(in.Shape) > lim.MaxRank {
		return nil, 0, badf("input %q: shape must have 1 to %d dimensions", in.Name, lim.MaxRank)
	}
	n := 1
	for _, d := range in.Shape {
		if d < 0 || d > int64(lim.MaxElements) {
			return nil, 0, badf("input %q: bad dimension %d", in.Name, d)
		}
		n *= int(d)
		if n > lim.MaxElements {
			return nil, 0, badf("input %q: more than %d elements", in.Name, lim.MaxElements)
		}
	}
	t := &onnx.Tensor{Name: in.Name, DType: dt, Dims: append([]int64(nil), in.Shape...)}
	size, hasSize, err := intParam(in.Parameters, "binary_data_size")
	if err != nil {
		return nil, 0, err
	}
	hasData := len(in.Data) > 0 && string(in.Data) != "null"
	switch {
	case hasSize && hasData:
		return nil, 0, badf("input %q has both data and binary_data_size", in.Name)
	case hasSize && dt == onnx.String:
		if size > len(bin) {
			return nil, 0, badf("input %q: binary section too short (%d bytes left, %d needed)", in.Name, len(bin), size)
		}
		if err := fillBytes(t, bin[:size], n); err != nil {
			return nil, 0, badf("input %q: %v", in.Name, err)
		}
		return t, size, nil
	case hasSize:
		if size != n*elemSize(dt) {
			return nil, 0, badf("input %q: binary_data_size %d, shape and datatype need %d bytes", in.Name, size, n*elemSize(dt))
		}
		if size > len(bin) {
			return nil, 0, badf("input %q: binary section too short (%d bytes left, %d needed)", in.Name, len(bin), size)
		}
		fillBinary(t, bin[:size], n)
		return t, size, nil
	case hasData:
		if err := parseData(t, in.Data, n); err != nil {
			return nil, 0, badf("input %q: %v", in.Name, err)
		}
		return t, 0, nil
	}
	return nil, 0, badf("input %q has no data", in.Name)
}

func boolParam(p wireParams, key string) (bool, error) {
	raw, ok := p[key]
	if !ok {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, badf("parameter %q must be true or false", key)
	}
	return b, nil
}

// uintParam reads an unsigned integer parameter (Triton's timeout and priority are uint64).
func uintParam(p wireParams, key string) (uint64, bool, error) {
	raw, ok := p[key]
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, false, badf("parameter %q must be a non-negative integer", key)
	}
	return v, true, nil
}

func intParam(p wireParams, key string) (int, bool, error) {
	raw, ok := p[key]
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || v < 0 || v > math.MaxInt32 {
		return 0, false, badf("parameter %q must be a non-negative integer", key)
	}
	return int(v), true, nil
}

// fillBinary decodes n little-endian elements of t.DType from b (len(b) is exact; not BYTES).
func fillBinary(t *onnx.Tensor, b []byte, n int) {
	le := binary.LittleEndian
	switch t.DType {
	case onnx.Float:
		t.F32 = make([]float32, n)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return
	case onnx.Float16, onnx.BFloat16:
		t.F32 = make([]float32, n)
		for i := range t.F32 {
			if h := le.Uint16(b[2*i:]); t.DType == onnx.Float16 {
				t.F32[i] = halfToFloat(h)
			} else {
				t.F32[i] = bf16ToFloat(h)
			}
		}
		return
	case onnx.Double:
		t.F64 = make([]float64, n)
		for i := range t.F64 {
			t.F64[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
		return
	}
	t.I64 = make([]int64, n)
	for i := range t.I64 {
		var v int64
		switch t.DType {
		case onnx.Int64, onnx.Uint64:
			v = int64(le.Uint64(b[8*i:]))
		case onnx.Int32:
			v = int64(int32(le.Uint32(b[4*i:])))
		case onnx.Uint32:
			v = int64(le.Uint32(b[4*i:]))
		case onnx.Int16:
			v = int64(int16(le.Uint16(b[2*i:])))
		case onnx.Uint16:
			v = int64(le.Uint16(b[2*i:]))
		case onnx.Int8:
			v = int64(int8(b[i]))
		case onnx.Uint8:
			v = int64(b[i])
		case onnx.Bool:
			if b[i] != 0 {
				v = 1
			}
		}
		t.I64[i] = v
	}
}

// fillBytes decodes exactly n BYTES elements from b: each a 4-byte little-endian length,
// then that many bytes.
func fillBytes(t *onnx.Tensor, b []byte, n int) error {
	t.Strings = make([]string, 0, min(n, len(b)/4))
	for len(t.Strings) < n {
		if len(b) < 4 {
			return fmt.Errorf("BYTES element %d: binary data ends inside its length", len(t.Strings))
		}
		l := binary.LittleEndian.Uint32(b)
		if uint64(l) > uint64(len(b)-4) {
			return fmt.Errorf("BYTES element %d: length %d runs past the binary data", len(t.Strings), l)
		}
		t.Strings = append(t.Strings, string(b[4:4+l]))
		b = b[4+l:]
	}
	if len(b) != 0 {
		return fmt.Errorf("BYTES: %d bytes left after %d elements", len(b), n)
	}
	return nil
}

// parseData reads the "data" member: a flat or nested JSON array of exactly n numbers
// (true/false for BOOL), in row-major order. Nesting is flattened, not checked against
// the shape, as the protocol allows either form.
func parseData(t *onnx.Tensor, raw []byte, n int) error {
	if t.DType == onnx.String {
		return parseStrings(t, raw, n)
	}
	switch t.DType {
	case onnx.Float, onnx.Float16, onnx.BFloat16:
		t.F32 = make([]float32, 0, n)
	case onnx.Double:
		t.F64 = make([]float64, 0, n)
	default:
		t.I64 = make([]int64, 0, n)
	}
	count, depth := 0, 0
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
			continue
		case c == '[':
			depth++
			if depth > 32 {
				return errors.New("data nested too deeply")
			}
			i++
			continue
		case c == ']':
			depth--
			if depth < 0 {
				return errors.New("unbalanced brackets in data")
			}
			i++
			continue
		}
		if depth == 0 {
			return errors.New("data must be a JSON array")
		}
		j := i
		for j < len(raw) && !isDelim(raw[j]) {
			j++
		}
		if count == n {
			return fmt.Errorf("data has more than the %d elements its shape needs", n)
		}
		if err := appendElem(t, raw[i:j]); err != nil {
			return err
		}
		count++
		i = j
	}
	if depth != 0 {
		return errors.New("unbalanced brackets in data")
	}
	if count != n {
		return fmt.Errorf("data has %d elements, shape needs %d", count, n)
	}
	return nil
}

func isDelim(c byte) bool {
	return c == ',' || c == ']' || c == '[' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func appendElem(t *onnx.Tensor, tok []byte) error {
	// The strconv parsers do not keep their argument, so the bytes need no copy; errors
	// quote s, which copies it.
	s := unsafe.String(unsafe.SliceData(tok), len(tok))
	switch t.DType {
	case onnx.Float, onnx.Float16, onnx.BFloat16:
		v, err := strconv.ParseFloat(s, 32)
		if t.DType != onnx.Float && err == nil {
			var ok bool
			if v, err = strconv.ParseFloat(s, 64); err == nil {
				var f float32
				f, ok = roundTo(t.DType, v)
				v = float64(f)
			}
			if !ok {
				return fmt.Errorf("%q is out of the range of %s", s, DatatypeName(t.DType))
			}
		}
		if err != nil {
			return fmt.Errorf("%q is not an %s number", s, DatatypeName(t.DType))
		}
		t.F32 = append(t.F32, float32(v))
	case onnx.Double:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%q is not an FP64 number", s)
		}
		t.F64 = append(t.F64, v)
	case onnx.Bool:
		switch s {
		case "true", "1":
			t.I64 = append(t.I64, 1)
		case "false", "0":
			t.I64 = append(t.I64, 0)
		default:
			return fmt.Errorf("%q is not a BOOL", s)
		}
	default:
		lo, hi, _ := intRange(t.DType)
		var v int64
		if u, err := strconv.ParseUint(s, 10, 64); err == nil && u <= hi {
			v = int64(u)
		} else if x, err := strconv.ParseInt(s, 10, 64); err == nil && x < 0 && x >= lo {
			v = x
		} else {
			return fmt.Errorf("%q is not a %s", s, DatatypeName(t.DType))
		}
		t.I64 = append(t.I64, v)
	}
	return nil
}

// parseStrings reads a BYTES input's "data": a flat or nested array of exactly n strings.
func parseStrings(t *onnx.Tensor, raw []byte, n int) error {
	s := &scanner{b: raw}
	t.Strings = make([]string, 0, min(n, len(raw)/2))
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > 32 {
			return errors.New("data nested too deeply")
		}
		return s.array(func() error {
			if s.peek() == '[' {
				return walk(depth + 1)
			}
			if len(t.Strings) == n {
				return fmt.Errorf("data has more than the %d elements its shape needs", n)
			}
			str, err := s.str()
			if err != nil {
				return errors.New("BYTES data must be an array of strings")
			}
			t.Strings = append(t.Strings, str)
			return nil
		})
	}
	if s.peek() != '[' {
		return errors.New("data must be a JSON array")
	}
	if err := walk(1); err != nil {
		return err
	}
	if len(t.Strings) != n {
		return fmt.Errorf("data has %d elements, shape needs %d", len(t.Strings), n)
	}
	return nil
}

// HeaderLength parses an Inference-Header-Content-Length header value; an empty value is -1.
func HeaderLength(v []byte) (int, error) {
	if len(v) == 0 {
		return -1, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 {
		return 0, badf("bad Inference-Header-Content-Length %q", v)
	}
	return n, nil
}

// elements returns the number of elements a tensor's data holds.
func elements(t *onnx.Tensor) int {
	switch {
	case t.F32 != nil:
		return len(t.F32)
	case t.F64 != nil:
		return len(t.F64)
	case t.I64 != nil:
		return len(t.I64)
	case t.Strings != nil:
		return len(t.Strings)
	}
	if s := elemSize(t.DType); s > 0 {
		return len(t.Raw) / s
	}
	return 0
}
