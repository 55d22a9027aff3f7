package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"idunno/netfault"
)

// Client calls methods on Servers. It is safe for concurrent use and keeps at most
// MaxIdle idle connections per address.
type Client struct {
	secret  []byte
	MaxIdle int

	mu   sync.Mutex
	idle map[string][]net.Conn
}

// NewClient returns a client that authenticates with secret.
func NewClient(secret []byte) *Client {
	return &Client{secret: secret, MaxIdle: 8, idle: map[string][]net.Conn{}}
}

// Call sends req to addr and returns the response. A non-empty response Err comes back as
// a *RemoteError (with the response's Code). Without a deadline in ctx, DefaultWait applies.
func (c *Client) Call(ctx context.Context, addr string, req *Message) (*Message, error) {
	if netfault.Cut() {
		return nil, fmt.Errorf("rpc: %s %s: %w", addr, req.Method, netfault.ErrCut)
	}
	dl := deadline(ctx)
	conn, fresh, err := c.get(ctx, addr, dl)
	if err != nil {
		return nil, err
	}
	resp, err := roundTrip(conn, req, dl)
	if err != nil && !fresh {
		// A pooled connection may have been closed by the server while idle: retry once fresh.
		conn.Close()
		conn, err = c.dial(ctx, addr, dl)
		if err != nil {
			return nil, err
		}
		resp, err = roundTrip(conn, req, dl)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc: %s %s: %w", addr, req.Method, err)
	}
	c.put(addr, conn)
	if resp.Err != "" {
		return resp, &RemoteError{Msg: resp.Err, Code: resp.Code}
	}
	return resp, nil
}

// CallJSON calls method with JSON arguments and decodes the JSON result into reply (if non-nil).
func (c *Client) CallJSON(ctx context.Context, addr, method string, args, reply any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("rpc: encode %s arguments: %w", method, err)
	}
	resp, err := c.Call(ctx, addr, &Message{Method: method, Args: raw})
	if err != nil {
		return err
	}
	if reply != nil && len(resp.Args) > 0 {
		if err := json.Unmarshal(resp.Args, reply); err != nil {
			return fmt.Errorf("rpc: decode %s result: %w", method, err)
		}
	}
	return nil
}

// Close closes every idle connection.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cs := range c.idle {
		for _, cn := range cs {
			cn.Close()
		}
		delete(c.idle, a)
	}
}

func roundTrip(conn net.Conn, req *Message, dl time.Time) (*Message, error) {
	conn.SetDeadline(dl)
	if err := writeFrame(conn, req); err != nil {
		return nil, err
	}
	return readFrame(conn)
}

func (c *Client) get(ctx context.Context, addr string, dl time.Time) (net.Conn, bool, error) {
	c.mu.Lock()
	if cs := c.idle[addr]; len(cs) > 0 {
		conn := cs[len(cs)-1]
		c.idle[addr] = cs[:len(cs)-1]
		c.mu.Unlock()
		return conn, false, nil
	}
	c.mu.Unlock()
	conn, err := c.dial(ctx, addr, dl)
	return conn, true, err
}

func (c *Client) dial(ctx context.Context, addr string, dl time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: dl}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	conn.SetDeadline(dl)
	if err := clientHandshake(conn, c.secret); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc: %s: %w", addr, err)
	}
	return conn, nil
}

func (c *Client) put(addr string, conn net.Conn) {
	conn.SetDeadline(time.Time{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle[addr]) >= c.MaxIdle {
		conn.Close()
		return
	}
	c.idle[addr] = append(c.idle[addr], conn)
}
