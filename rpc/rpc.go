// Package rpc is IDunno's internal request/response transport: length-framed messages over
// TCP, each connection authenticated with the cluster secret, every call bounded by a deadline.
//
// A node runs one Server; subsystems register methods on it with a prefix ("fd.", "sdfs.",
// "sched.", "log."). Callers share one Client, which pools idle connections per address.
package rpc

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Limits on one frame. A body larger than MaxBody is refused by both ends.
const (
	MaxHeader   = 1 << 20
	MaxBody     = 64 << 20
	DefaultWait = 10 * time.Second // deadline applied when a call's context has none
	nonceLen    = 16
	magic       = 0x49445231 // "IDR1"
)

// Message is one request or response. Args is a JSON value (method arguments or results);
// Body carries bulk bytes (file blocks, tensors) without JSON encoding.
type Message struct {
	Method string          `json:"m,omitempty"`
	Err    string          `json:"e,omitempty"`
	Code   string          `json:"c,omitempty"`  // with Err: what kind of failure it is (see Coded), "" if none
	Epoch  uint64          `json:"ep,omitempty"` // coordinator epoch for fencing, 0 if unused
	Args   json.RawMessage `json:"a,omitempty"`
	Body   []byte          `json:"-"`
}

// RemoteError is an error returned by the handler on the other side. Code is the code the
// handler's error carried (see Coded), "" if none.
type RemoteError struct {
	Msg  string
	Code string
}

func (e *RemoteError) Error() string { return e.Msg }

// RPCCode returns the code the remote error carried, so that a handler that returns a
// RemoteError it got from another node (a forwarded call) passes the code on.
func (e *RemoteError) RPCCode() string { return e.Code }

// Coded is an error that carries a machine-readable code across the wire: a handler's error
// that is (or wraps) a Coded reaches the caller as a *RemoteError with that Code, so callers
// branch on the code instead of matching the text. Codes are namespaced by package
// ("sched.retry").
type Coded interface {
	error
	RPCCode() string
}

// CodeOf returns the code err carries (a local Coded error, or a *RemoteError), "" if none.
func CodeOf(err error) string {
	var c Coded
	if errors.As(err, &c) {
		return c.RPCCode()
	}
	return ""
}

// IsRemote reports whether err came from the remote handler (as opposed to the transport).
func IsRemote(err error) bool {
	var re *RemoteError
	return errors.As(err, &re)
}

func writeFrame(w io.Writer, m *Message) error {
	hdr, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("rpc: encode header: %w", err)
	}
	if len(hdr) > MaxHeader || len(m.Body) > MaxBody {
		return fmt.Errorf("rpc: frame too large (header %d, body %d)", len(hdr), len(m.Body))
	}
	var pre [12]byte
	binary.BigEndian.PutUint32(pre[0:], magic)
	binary.BigEndian.PutUint32(pre[4:], uint32(len(hdr)))
	binary.BigEndian.PutUint32(pre[8:], uint32(len(m.Body)))
	head := append(append(make([]byte, 0, 12+len(hdr)), pre[:]...), hdr...)
	if len(m.Body) < 64<<10 {
		_, err = w.Write(append(head, m.Body...)) // one write for small frames
		return err
	}
	// a large body (training parameters and gradients, file blocks) goes out as it is
	// (writev on a TCP connection), not copied behind the header first
	bufs := net.Buffers{head, m.Body}
	_, err = bufs.WriteTo(w)
	return err
}

func readFrame(r io.Reader) (*Message, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint32(pre[0:]) != magic {
		return nil, errors.New("rpc: bad frame magic")
	}
	hl, bl := binary.BigEndian.Uint32(pre[4:]), binary.BigEndian.Uint32(pre[8:])
	if hl > MaxHeader || bl > MaxBody {
		return nil, fmt.Errorf("rpc: frame too large (header %d, body %d)", hl, bl)
	}
	hdr := make([]byte, hl)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	m := &Message{}
	if err := json.Unmarshal(hdr, m); err != nil {
		return nil, fmt.Errorf("rpc: decode header: %w", err)
	}
	if bl > 0 {
		// a body of its own, not behind the header: it starts aligned, so a receiver can
		// view float32 data in place (sched's training transfers) instead of copying it
		m.Body = make([]byte, bl)
		if _, err := io.ReadFull(r, m.Body); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func mac(secret []byte, role byte, a, b []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte{role})
	h.Write(a)
	h.Write(b)
	return h.Sum(nil)
}

// serverHandshake proves that both ends know the secret: the server sends a nonce, the client
// answers with its own nonce and a MAC over both, the server answers with a MAC of its own.
func serverHandshake(c net.Conn, secret []byte) error {
	sn := make([]byte, nonceLen)
	if _, err := rand.Read(sn); err != nil {
		return err
	}
	if _, err := c.Write(sn); err != nil {
		return err
	}
	in := make([]byte, nonceLen+sha256.Size)
	if _, err := io.ReadFull(c, in); err != nil {
		return err
	}
	cn := in[:nonceLen]
	if !hmac.Equal(in[nonceLen:], mac(secret, 'c', sn, cn)) {
		return errors.New("rpc: client failed authentication")
	}
	_, err := c.Write(mac(secret, 's', cn, sn))
	return err
}

func clientHandshake(c net.Conn, secret []byte) error {
	sn := make([]byte, nonceLen)
	if _, err := io.ReadFull(c, sn); err != nil {
		return err
	}
	cn := make([]byte, nonceLen)
	if _, err := rand.Read(cn); err != nil {
		return err
	}
	if _, err := c.Write(append(cn, mac(secret, 'c', sn, cn)...)); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("rpc: server closed during authentication (wrong cluster secret?): %w", err)
	}
	if !hmac.Equal(got, mac(secret, 's', cn, sn)) {
		return errors.New("rpc: server failed authentication")
	}
	return nil
}

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(DefaultWait)
}
