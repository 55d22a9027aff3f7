package sched

import (
	"context"
	"sync"

	"idunno/fd"
	"idunno/sdfs"
)

// addStore opens the node's SDFS replica store, registers its RPC methods and adds it as
// a component; Node.SDFS is then the store and Node.SDFS.Client() a client for the cluster.
func (n *Node) addStore() error {
	st, err := sdfs.New(sdfs.DefaultConfig(), n.Cfg.DataDir, sdfs.Peer{Name: n.Cfg.Name, Addr: n.Cfg.RPCAddr()},
		nodeMembership{n}, n.Client)
	if err != nil {
		return err
	}
	st.Logf = n.Logger("sdfs")
	st.Register(n.RPC)
	n.SDFS = st
	n.Add(&storeComponent{st: st})
	return nil
}

// nodeMembership gives the store the node's detector, which exists only once Run started it.
type nodeMembership struct{ n *Node }

func (m nodeMembership) Members() []fd.Member {
	if m.n.FD == nil {
		return nil
	}
	return m.n.FD.Members()
}

func (m nodeMembership) Subscribe(buf int) (<-chan fd.Event, func()) {
	if m.n.FD == nil {
		return nil, func() {}
	}
	return m.n.FD.Subscribe(buf)
}

// storeComponent runs the store's background repair loop.
type storeComponent struct {
	st     *sdfs.Store
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (c *storeComponent) Name() string { return "sdfs" }

func (c *storeComponent) Start(ctx context.Context) error {
	ctx, c.cancel = context.WithCancel(ctx)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.st.Run(ctx)
	}()
	return nil
}

func (c *storeComponent) Stop() error {
	c.cancel()
	c.wg.Wait()
	return nil
}
