// Package logquery searches nodes' log files: the "log.grep" RPC method each node serves, and
// a client that asks every live node at once.
package logquery

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"idunno/rpc"
)

// Bounds on one search. A request may ask for less, never for more.
const (
	MaxPattern     = 1024             // bytes of regular expression
	MaxMatches     = 10000            // matching lines returned per node (all are counted)
	MaxReplyBytes  = 16 << 20         // bytes of matching lines returned per node
	MaxLineBytes   = 64 << 10         // longer lines are cut to this length
	DefaultTimeout = 10 * time.Second // how long a node may search when the request says nothing
	MaxTimeout     = 60 * time.Second
)

// Method is the RPC method name.
const Method = "log.grep"

// Request is the argument of "log.grep".
type Request struct {
	Pattern   string `json:"pattern"`              // Go regexp (RE2 syntax)
	Max       int    `json:"max,omitempty"`        // matching lines to return; 0 or more than MaxMatches = MaxMatches
	TimeoutMS int64  `json:"timeout_ms,omitempty"` // search budget; 0 = DefaultTimeout
}

// Result is one node's answer. Lines are the matching lines in file order (without the
// newline); Count is every matching line in the file, which exceeds len(Lines) when
// Truncated. Err is set when the node could not be asked or could not search.
type Result struct {
	Node      string   `json:"node"`
	Lines     []string `json:"-"` // sent in the message body, newline-separated
	Count     int      `json:"count"`
	Truncated bool     `json:"truncated,omitempty"`
	Err       error    `json:"-"`
}

// Compile checks a pattern against the bounds and compiles it.
func Compile(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, errors.New("logquery: empty pattern")
	}
	if len(pattern) > MaxPattern {
		return nil, fmt.Errorf("logquery: pattern of %d bytes is longer than %d", len(pattern), MaxPattern)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("logquery: bad pattern: %w", err)
	}
	return re, nil
}

// Register serves "log.grep" on s, searching the file at logPath and answering as nodeName.
func Register(s *rpc.Server, logPath, nodeName string) {
	s.Handle(Method, func(ctx context.Context, req *rpc.Message) (*rpc.Message, error) {
		var q Request
		if err := json.Unmarshal(req.Args, &q); err != nil {
			return nil, fmt.Errorf("logquery: bad request: %w", err)
		}
		res, err := Search(ctx, logPath, q)
		if err != nil {
			return nil, err
		}
		res.Node = nodeName
		return encode(res)
	})
}

// Search runs q over the file at path: a bounded scan of what the file held when the search
// began, stopped by ctx or by q's timeout, whichever comes first.
func Search(ctx context.Context, path string, q Request) (Result, error) {
	re, err := Compile(q.Pattern)
	if err != nil {
		return Result{}, err
	}
	max := q.Max
	if max <= 0 || max > MaxMatches {
		max = MaxMatches
	}
	timeout := time.Duration(q.TimeoutMS) * time.Millisecond
	if timeout <= 0 || timeout > MaxTimeout {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	f, err := os.Open(path)
	if err != nil {
		return Result{}, fmt.Errorf("logquery: open log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Result{}, fmt.Errorf("logquery: stat log: %w", err)
	}
	// Only what is there now: a node that keeps logging must not keep the search going.
	return scan(ctx, io.LimitReader(f, st.Size()), re, max)
}

func scan(ctx context.Context, r io.Reader, re *regexp.Regexp, max int) (Result, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var res Result
	bytesOut := 0
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("logquery: search stopped after %d lines: %w", n, err)
			}
		}
		line, err := readLine(br)
		if (err == nil || len(line) > 0) && re.Match(line) {
			res.Count++
			if len(res.Lines) < max && bytesOut+len(line) <= MaxReplyBytes {
				res.Lines = append(res.Lines, string(line))
				bytesOut += len(line) + 1
			} else {
				res.Truncated = true
			}
		}
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("logquery: read log: %w", err)
		}
	}
}

// readLine returns the next line without its newline, cut to MaxLineBytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == nil {
		return bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'}), nil
	}
	if err != bufio.ErrBufferFull {
		return line, err
	}
	out := append([]byte(nil), line...)
	for err == bufio.ErrBufferFull {
		line, err = br.ReadSlice('\n')
		if room := MaxLineBytes - len(out); room > 0 {
			out = append(out, line[:min(room, len(line))]...)
		}
	}
	return bytes.TrimSuffix(bytes.TrimSuffix(out, []byte{'\n'}), []byte{'\r'}), err
}

func encode(res Result) (*rpc.Message, error) {
	args, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var body bytes.Buffer
	for _, l := range res.Lines {
		body.WriteString(l)
		body.WriteByte('\n')
	}
	return &rpc.Message{Args: args, Body: body.Bytes()}, nil
}

func decode(m *rpc.Message) (Result, error) {
	var res Result
	if err := json.Unmarshal(m.Args, &res); err != nil {
		return res, fmt.Errorf("logquery: bad reply: %w", err)
	}
	if len(m.Body) > 0 {
		for _, l := range bytes.Split(bytes.TrimSuffix(m.Body, []byte{'\n'}), []byte{'\n'}) {
			res.Lines = append(res.Lines, string(l))
		}
	}
	if len(res.Lines) > res.Count {
		return res, fmt.Errorf("logquery: bad reply: %d lines for %d matches", len(res.Lines), res.Count)
	}
	return res, nil
}
