package serving

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The request's JSON is read by a hand-written scanner rather than encoding/json: a LeNet
// request is 8 KB of numbers, and scanning it once, without reflection, keeps the endpoint's
// overhead small. The scanner knows the request's shape (object keys of the Open Inference
// Protocol), skips members it does not know after checking their syntax, and keeps each
// "data" and parameter value as a raw span that the typed parsers read afterwards.

// maxJSONDepth bounds nesting, so hostile input cannot recurse deeply.
const maxJSONDepth = 64

type scanner struct {
	b []byte
	i int
}

func (s *scanner) errf(format string, args ...any) error {
	return fmt.Errorf("malformed JSON at byte %d: %s", s.i, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.errf("expected %q", c)
	}
	s.i++
	return nil
}

// object calls member for each key of an object; member must consume the value.
func (s *scanner) object(member func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.errf("expected a member name")
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errf("expected ',' or '}'")
		}
	}
}

// array calls elem for each element of an array; elem must consume the value.
func (s *scanner) array(elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errf("expected ',' or ']'")
		}
	}
}

// str reads a string literal, decoding escapes.
func (s *scanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.i
	for s.i < len(s.b) { // fast path: no escapes
		c := s.b[s.i]
		if c == '"' {
			s.i++
			return string(s.b[start : s.i-1]), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		s.i++
	}
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(out), nil
		case c < 0x20:
			return "", s.errf("control character in string")
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.errf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					if r2, ok = s.hex4(); !ok {
						return "", s.errf("bad \\u escape")
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", s.errf("bad escape \\%c", e)
		}
	}
	return "", s.errf("unterminated string")
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// value checks the syntax of any value and returns its bytes.
func (s *scanner) value(depth int) ([]byte, error) {
	if depth > maxJSONDepth {
		return nil, s.errf("nested more than %d deep", maxJSONDepth)
	}
	c := s.peek()
	start := s.i
	var err error
	switch {
	case c == '{':
		err = s.object(func(string) error { _, err := s.value(depth + 1); return err })
	case c == '[':
		err = s.array(func() error { _, err := s.value(depth + 1); return err })
	case c == '"':
		_, err = s.str()
	case c == '-' || (c >= '0' && c <= '9'):
		err = s.number()
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	default:
		err = s.errf("expected a value")
	}
	return s.b[start:s.i], err
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.errf("expected %s", lit)
	}
	s.i += len(lit)
	return nil
}

// number checks a number's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.errf("bad number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.errf("bad number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.errf("bad number")
		}
	}
	return nil
}

// params reads a parameters object into raw values.
func (s *scanner) params() (wireParams, error) {
	if s.peek() == 'n' {
		return nil, s.literal("null")
	}
	p := wireParams{}
	err := s.object(func(key string) error {
		v, err := s.value(1)
		p[key] = json.RawMessage(v)
		return err
	})
	return p, err
}

// strOrNull reads a string (null reads as "").
func (s *scanner) strOrNull() (string, error) {
	if s.peek() == 'n' {
		return "", s.literal("null")
	}
	return s.str()
}

// shape reads an array of integers.
func (s *scanner) shape(max int) ([]int64, error) {
	var dims []int64
	err := s.array(func() error {
		s.ws()
		start := s.i
		if err := s.number(); err != nil {
			return err
		}
		d, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
		if err != nil {
			return s.errf("shape dimension %q is not an integer", s.b[start:s.i])
		}
		if len(dims) == max {
			return s.errf("shape has more than %d dimensions", max)
		}
		dims = append(dims, d)
		return nil
	})
	return dims, err
}

// parseRequest reads an infer request body into its wire form.
func parseRequest(b []byte, lim Limits) (wireRequest, error) {
	s := &scanner{b: b}
	var w wireRequest
	if s.peek() != '{' {
		return w, s.errf("the body must be a JSON object")
	}
	err := s.object(func(key string) error {
		var err error
		switch key {
		case "id":
			w.ID, err = s.strOrNull()
		case "parameters":
			w.Parameters, err = s.params()
		case "inputs":
			w.Inputs = nil // a repeated member replaces the earlier one, as in encoding/json
			err = s.array(func() error {
				if len(w.Inputs) >= lim.MaxInputs {
					return badf("more than %d inputs", lim.MaxInputs)
				}
				in, err := s.input(lim)
				w.Inputs = append(w.Inputs, in)
				return err
			})
		case "outputs":
			w.Outputs = nil
			err = s.array(func() error {
				if len(w.Outputs) >= lim.MaxInputs {
					return badf("more than %d outputs", lim.MaxInputs)
				}
				var o wireOutput
				err := s.object(func(key string) error {
					var err error
					switch key {
					case "name":
						o.Name, err = s.strOrNull()
					case "parameters":
						o.Parameters, err = s.params()
					default:
						_, err = s.value(2)
					}
					return err
				})
				w.Outputs = append(w.Outputs, o)
				return err
			})
		default:
			_, err = s.value(1)
		}
		return err
	})
	if err != nil {
		return w, err
	}
	if s.peek() != 0 {
		return w, s.errf("data after the top-level object")
	}
	return w, nil
}

func (s *scanner) input(lim Limits) (wireInput, error) {
	var in wireInput
	err := s.object(func(key string) error {
		var err error
		switch key {
		case "name":
			in.Name, err = s.strOrNull()
		case "datatype":
			in.Datatype, err = s.strOrNull()
		case "shape":
			in.Shape, err = s.shape(lim.MaxRank)
		case "parameters":
			in.Parameters, err = s.params()
		case "data":
			var v []byte
			v, err = s.value(2)
			in.Data = v
		default:
			_, err = s.value(2)
		}
		return err
	})
	return in, err
}
