package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func startServer(t *testing.T, secret string) (*Server, string) {
	t.Helper()
	s := NewServer([]byte(secret))
	s.Logf = t.Logf
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

func TestCallRoundTrip(t *testing.T) {
	s, addr := startServer(t, "k")
	type args struct{ A, B int }
	HandleJSON(s, "add", func(ctx context.Context, a args) (int, error) { return a.A + a.B, nil })
	s.Handle("echo", func(ctx context.Context, m *Message) (*Message, error) { return &Message{Body: m.Body}, nil })
	s.Handle("fail", func(ctx context.Context, m *Message) (*Message, error) { return nil, errors.New("boom") })
	c := NewClient([]byte("k"))
	defer c.Close()
	var sum int
	for i := 0; i < 3; i++ { // reuses the pooled connection
		if err := c.CallJSON(context.Background(), addr, "add", args{2, 3}, &sum); err != nil || sum != 5 {
			t.Fatalf("add = %d, %v", sum, err)
		}
	}
	body := bytes.Repeat([]byte{7}, 3<<20)
	r, err := c.Call(context.Background(), addr, &Message{Method: "echo", Body: body})
	if err != nil || !bytes.Equal(r.Body, body) {
		t.Fatalf("echo: %v", err)
	}
	if err := c.CallJSON(context.Background(), addr, "fail", nil, nil); !IsRemote(err) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("fail: %v", err)
	}
	if err := c.CallJSON(context.Background(), addr, "nope", nil, nil); err == nil || !strings.Contains(err.Error(), "unknown method") {
		t.Fatalf("unknown: %v", err)
	}
}

func TestWrongSecretRejected(t *testing.T) {
	s, addr := startServer(t, "right")
	s.Handle("x", func(ctx context.Context, m *Message) (*Message, error) { return &Message{}, nil })
	c := NewClient([]byte("wrong"))
	defer c.Close()
	if err := c.CallJSON(context.Background(), addr, "x", nil, nil); err == nil {
		t.Fatal("call with wrong secret succeeded")
	}
}

func TestDeadline(t *testing.T) {
	s, addr := startServer(t, "k")
	s.Handle("slow", func(ctx context.Context, m *Message) (*Message, error) {
		time.Sleep(2 * time.Second)
		return &Message{}, nil
	})
	c := NewClient([]byte("k"))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.CallJSON(ctx, addr, "slow", nil, nil); err == nil {
		t.Fatal("slow call returned no error")
	}
	if time.Since(start) > time.Second {
		t.Fatalf("deadline not enforced: %v", time.Since(start))
	}
}

func FuzzReadFrame(f *testing.F) {
	var b bytes.Buffer
	writeFrame(&b, &Message{Method: "m", Args: []byte(`{"x":1}`), Body: []byte("abc")})
	f.Add(b.Bytes())
	f.Add([]byte{0x49, 0x44, 0x52, 0x31, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := readFrame(bytes.NewReader(data))
		if err == nil {
			var out bytes.Buffer
			if err := writeFrame(&out, m); err != nil {
				t.Fatalf("re-encode: %v", err)
			}
		}
	})
}

type codedErr struct{ msg string }

func (e codedErr) Error() string   { return e.msg }
func (e codedErr) RPCCode() string { return "test.code" }

// A handler's error that is (or wraps) a Coded reaches the caller with its code, and a
// node that returns a RemoteError it got from another node passes the code on.
func TestErrorCodeCrossesTheWire(t *testing.T) {
	s1, addr1 := startServer(t, "k")
	s2, addr2 := startServer(t, "k")
	c := NewClient([]byte("k"))
	defer c.Close()
	s1.Handle("coded", func(ctx context.Context, m *Message) (*Message, error) {
		return nil, fmt.Errorf("wrapped: %w", codedErr{"boom"})
	})
	s1.Handle("plain", func(ctx context.Context, m *Message) (*Message, error) { return nil, errors.New("plain") })
	s2.Handle("forward", func(ctx context.Context, m *Message) (*Message, error) {
		_, err := c.Call(ctx, addr1, &Message{Method: "coded"})
		return nil, err
	})
	for _, tc := range []struct{ addr, method, code string }{
		{addr1, "coded", "test.code"}, {addr2, "forward", "test.code"}, {addr1, "plain", ""},
	} {
		err := c.CallJSON(context.Background(), tc.addr, tc.method, nil, nil)
		var re *RemoteError
		if !errors.As(err, &re) || re.Code != tc.code || CodeOf(err) != tc.code {
			t.Errorf("%s: %v (%#v), want code %q", tc.method, err, err, tc.code)
		}
	}
	if err := c.CallJSON(context.Background(), addr1, "coded", nil, nil); !strings.Contains(err.Error(), "wrapped: boom") {
		t.Errorf("text lost: %v", err)
	}
	if CodeOf(codedErr{"x"}) != "test.code" || CodeOf(errors.New("x")) != "" || CodeOf(nil) != "" {
		t.Error("CodeOf of local errors")
	}
}
