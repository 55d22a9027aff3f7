package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"idunno/netfault"
)

// Handler serves one method. The context carries the caller's deadline (as far as the
// server can know it: IdleTimeout bounds the wait for a request, HandlerTimeout its run).
type Handler func(ctx context.Context, req *Message) (*Message, error)

// Server accepts authenticated connections and dispatches requests to handlers.
// Connections are served one request at a time, each on its own goroutine.
type Server struct {
	secret         []byte
	IdleTimeout    time.Duration // how long an idle connection is kept open
	HandlerTimeout time.Duration // upper bound on one handler's run
	MaxConns       int           // bound on concurrently open connections
	Logf           func(format string, args ...any)

	mu       sync.RWMutex
	handlers map[string]Handler
	ln       net.Listener
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// NewServer returns a server that admits only clients holding secret.
func NewServer(secret []byte) *Server {
	return &Server{
		secret:         secret,
		IdleTimeout:    2 * time.Minute,
		HandlerTimeout: 5 * time.Minute,
		MaxConns:       1024,
		Logf:           log.Printf,
		handlers:       map[string]Handler{},
		conns:          map[net.Conn]struct{}{},
	}
}

// Handle registers h for method. Registering a method twice panics: it is a programming error.
func (s *Server) Handle(method string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.handlers[method]; dup {
		panic("rpc: duplicate handler " + method)
	}
	s.handlers[method] = h
}

// HandleJSON registers a handler whose arguments and result are JSON values.
func HandleJSON[A, R any](s *Server, method string, f func(ctx context.Context, args A) (R, error)) {
	s.Handle(method, func(ctx context.Context, req *Message) (*Message, error) {
		var a A
		if len(req.Args) > 0 {
			if err := json.Unmarshal(req.Args, &a); err != nil {
				return nil, fmt.Errorf("rpc: %s: bad arguments: %w", method, err)
			}
		}
		r, err := f(ctx, a)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		return &Message{Args: raw}, nil
	})
}

// Serve accepts connections on ln until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.RLock()
			closed := s.closed
			s.mu.RUnlock()
			if closed {
				return nil
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return fmt.Errorf("rpc: accept: %w", err)
		}
		s.mu.Lock()
		if s.closed || len(s.conns) >= s.MaxConns {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops accepting, closes every connection and waits for handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := serverHandshake(c, s.secret); err != nil {
		s.Logf("rpc: rejected %s: %v", c.RemoteAddr(), err)
		return
	}
	for {
		c.SetReadDeadline(time.Now().Add(s.IdleTimeout))
		req, err := readFrame(c)
		if err != nil || netfault.Cut() { // cut off: no answer
			return
		}
		resp := s.dispatch(req)
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if err := writeFrame(c, resp); err != nil {
			return
		}
	}
}

func (s *Server) dispatch(req *Message) (resp *Message) {
	s.mu.RLock()
	h := s.handlers[req.Method]
	s.mu.RUnlock()
	if h == nil {
		return &Message{Err: fmt.Sprintf("rpc: unknown method %q", req.Method)}
	}
	defer func() {
		if r := recover(); r != nil {
			s.Logf("rpc: handler %s panicked: %v", req.Method, r)
			resp = &Message{Err: fmt.Sprintf("rpc: internal error in %s", req.Method)}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), s.HandlerTimeout)
	defer cancel()
	r, err := h(ctx, req)
	if err != nil {
		return &Message{Err: err.Error(), Code: CodeOf(err)}
	}
	if r == nil {
		r = &Message{}
	}
	return r
}
