package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"idunno/rpc"
	"idunno/sched"
	"idunno/sdfs"
)

// Client talks to the cluster as a user's program does, from the test process, and
// records every operation's outcome in a History.
type Client struct {
	c    *Cluster
	sd   *sdfs.Client
	Hist *History
	// OpTimeout bounds one operation, retries included (default 10 s).
	OpTimeout time.Duration

	mu   sync.Mutex
	next int // node to try first (round robin over the nodes)
}

// NewClient returns a client of c that learns the membership from any node.
func NewClient(c *Cluster) *Client {
	cl := &Client{c: c, Hist: &History{}, OpTimeout: 10 * time.Second}
	cl.sd = sdfs.NewClient(sdfs.DefaultConfig(), c.RPC, cl.members)
	return cl
}

// members asks the nodes, starting from the round-robin one, for the live membership.
func (cl *Client) members(ctx context.Context) ([]sdfs.Peer, error) {
	var errs []error
	for _, a := range cl.order() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		var peers []sdfs.Peer
		err := cl.c.RPC.CallJSON(cctx, a, "sdfs.members", struct{}{}, &peers)
		cancel()
		if err == nil && len(peers) > 0 {
			return peers, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("chaos: no node answered for the membership: %w", errors.Join(errs...))
}

// order is every node's RPC address, starting at a different one on each call.
func (cl *Client) order() []string {
	addrs := cl.c.RPCAddrs()
	cl.mu.Lock()
	k := cl.next % len(addrs)
	cl.next++
	cl.mu.Unlock()
	return append(addrs[k:], addrs[:k]...)
}

// SDFS is the client's SDFS client.
func (cl *Client) SDFS() *sdfs.Client { return cl.sd }

// Put writes data under name and records the outcome: acked when Put returned success,
// unknown otherwise (a failed put may have committed before its reply was lost).
func (cl *Client) Put(name string, data []byte) Op {
	op := Op{Kind: OpPut, Key: name, Hash: Hash(data), Start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), cl.OpTimeout)
	defer cancel()
	_, err := cl.sd.Put(ctx, name, bytes.NewReader(data))
	op.End = time.Now()
	if err == nil {
		op.Outcome = Acked
	} else {
		op.Err = err.Error()
	}
	cl.Hist.Add(op)
	return op
}

// AddJob adds a job through any node, retrying other nodes with the same idempotency key
// (as `idunno job add` does) until acked, refused, or out of time.
func (cl *Client) AddJob(spec sched.JobSpec) Op {
	key := make([]byte, 12)
	rand.Read(key)
	spec.Request = hex.EncodeToString(key)
	op := Op{Kind: OpJobAdd, Key: spec.Name, Start: time.Now()}
	deadline := op.Start.Add(cl.OpTimeout)
	for {
		for _, a := range cl.order() {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), min(left, 6*time.Second))
			var r sched.JobAddReply
			err := cl.c.RPC.CallJSON(ctx, a, "sched.job.add", spec, &r)
			cancel()
			op.Via = a
			if err == nil {
				op.Outcome, op.Err = Acked, ""
				if r.NoStandby {
					op.Err = "acked without a standby"
				}
				op.End = time.Now()
				cl.Hist.Add(op)
				return op
			}
			op.Err = err.Error()
			if rpc.IsRemote(err) && !retryable(err) {
				op.Outcome = Refused
				op.End = time.Now()
				cl.Hist.Add(op)
				return op
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	op.Outcome, op.End = Unknown, time.Now()
	cl.Hist.Add(op)
	return op
}

// retryable reports whether a node's error leaves the call worth sending again (no
// coordinator, stepped down, not confirmed, fenced): the scheduler's error codes
// (sched.Retryable), not the error's text.
func retryable(err error) bool { return sched.Retryable(err) }

// Call makes one scheduler call through any node that answers (reads: stats, job get).
func (cl *Client) Call(method string, args, reply any, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		for _, a := range cl.order() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			last = cl.c.RPC.CallJSON(ctx, a, method, args, reply)
			cancel()
			if last == nil || (rpc.IsRemote(last) && !retryable(last)) {
				return last
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// ReadFile reads an SDFS file into a FileState (absent when no node has the name).
func (cl *Client) ReadFile(name string) (FileState, []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var buf bytes.Buffer
	_, err := cl.sd.Get(ctx, name, &buf)
	if err != nil {
		if errors.Is(err, sdfs.ErrNotFound) {
			return FileState{}, nil
		}
		return FileState{Err: err.Error()}, nil
	}
	return FileState{Present: true, Hash: Hash(buf.Bytes())}, buf.Bytes()
}

// PutReader stores a local stream (set-up data, not part of the history).
func (cl *Client) PutReader(name string, r io.Reader) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cl.sd.Put(ctx, name, r)
	return err
}
