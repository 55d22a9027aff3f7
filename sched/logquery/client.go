package logquery

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"idunno/rpc"
)

// Node is a node to ask: its name and RPC address.
type Node struct {
	Name, RPCAddr string
}

// Grep asks every node at once and returns one Result per node, sorted by node name. A node
// that fails to answer within q's timeout (plus a second for the network) gets a Result with
// Err set; the others are unaffected. Only an invalid pattern fails the whole call.
func Grep(ctx context.Context, c *rpc.Client, nodes []Node, q Request) ([]Result, error) {
	if _, err := Compile(q.Pattern); err != nil {
		return nil, err
	}
	if q.TimeoutMS <= 0 || q.TimeoutMS > MaxTimeout.Milliseconds() {
		q.TimeoutMS = DefaultTimeout.Milliseconds()
	}
	args, err := json.Marshal(q)
	if err != nil {
		return nil, fmt.Errorf("logquery: %w", err)
	}
	out := make([]Result, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Duration(q.TimeoutMS)*time.Millisecond+time.Second)
			defer cancel()
			resp, err := c.Call(cctx, n.RPCAddr, &rpc.Message{Method: Method, Args: args})
			if err != nil {
				out[i] = Result{Node: n.Name, Err: fmt.Errorf("logquery: %s: %w", n.Name, err)}
				return
			}
			res, err := decode(resp)
			res.Node, res.Err = n.Name, err
			out[i] = res
		}()
	}
	wg.Wait()
	sort.SliceStable(out, func(a, b int) bool { return out[a].Node < out[b].Node })
	return out, nil
}
