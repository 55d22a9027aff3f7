package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"idunno/client/localcluster"
	"idunno/fd"
	"idunno/node"
	"idunno/rpc"
)

// target is how a client command finds the cluster. Every client command calls
// addTargetFlags on its flag set, then t.client() and t.addr() (or t.nodes()):
//
//	--cluster DIR   a local cluster's directory (default $IDUNNO_CLUSTER): its cluster.json
//	                gives the nodes and the secret
//	--at HOST:PORT  one node's RPC address, for a real deployment; secret from IDUNNO_SECRET
type target struct {
	cluster, at string

	cl     *rpc.Client
	picked string
}

func addTargetFlags(fs *flag.FlagSet) *target {
	t := &target{}
	fs.StringVar(&t.cluster, "cluster", os.Getenv("IDUNNO_CLUSTER"), "local cluster directory (default $IDUNNO_CLUSTER)")
	fs.StringVar(&t.at, "at", os.Getenv("IDUNNO_AT"), "RPC address HOST:PORT of a node (default $IDUNNO_AT; secret from IDUNNO_SECRET)")
	return t
}

// candidates returns RPC addresses to try, in order, and the secret.
func (t *target) candidates() ([]string, []byte, error) {
	if t.at != "" {
		s := os.Getenv("IDUNNO_SECRET")
		if s == "" {
			return nil, nil, usageError("--at needs the cluster secret in IDUNNO_SECRET")
		}
		return []string{t.at}, []byte(s), nil
	}
	if t.cluster == "" {
		return nil, nil, errors.New("no cluster: pass --cluster DIR, set IDUNNO_CLUSTER, or pass --at HOST:PORT")
	}
	c, err := localcluster.Open(t.cluster)
	if err != nil {
		return nil, nil, err
	}
	// Live nodes first; the others last, in case the pid bookkeeping is stale.
	var addrs, rest []string
	live := map[string]bool{}
	for _, n := range c.Live() {
		addrs = append(addrs, n.RPCAddr)
		live[n.Name] = true
	}
	for _, n := range c.Nodes() {
		if !live[n.Name] {
			rest = append(rest, n.RPCAddr)
		}
	}
	return append(addrs, rest...), []byte(c.Secret()), nil
}

// client returns an RPC client holding the cluster secret.
func (t *target) client() (*rpc.Client, error) {
	if t.cl != nil {
		return t.cl, nil
	}
	_, secret, err := t.candidates()
	if err != nil {
		return nil, err
	}
	t.cl = rpc.NewClient(secret)
	return t.cl, nil
}

// addr returns the RPC address of the first node that answers.
func (t *target) addr() (string, error) {
	if t.picked != "" {
		return t.picked, nil
	}
	addrs, _, err := t.candidates()
	if err != nil {
		return "", err
	}
	cl, err := t.client()
	if err != nil {
		return "", err
	}
	var errs []error
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		err := cl.CallJSON(ctx, a, "fd.members", struct{}{}, nil)
		cancel()
		if err == nil {
			t.picked = a
			return a, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no node answered: %w", errors.Join(errs...))
}

// members returns one live node's view of the membership (self is the answering node).
func (t *target) members() (node.MembersReply, error) {
	var r node.MembersReply
	a, err := t.addr()
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = t.cl.CallJSON(ctx, a, "fd.members", struct{}{}, &r)
	return r, err
}

// nodes returns the membership as a live node sees it.
func (t *target) nodes() ([]fd.Member, error) {
	r, err := t.members()
	return r.Members, err
}
