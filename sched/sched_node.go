package sched

import (
	"bytes"
	"context"
	"idunno/fd"

	"idunno/sdfs"
)

// AddScheduler adds the scheduler (coordinator, standby and worker) to the node: it reads
// models and data from SDFS, runs them with the kernel on Cfg.Threads threads, and keeps
// its journal in DATA_DIR/sched.
func (n *Node) AddScheduler() error {
	mem := fdMembership{n}
	blobs := sdfsBlobs{sdfs.NewClient(sdfs.DefaultConfig(), n.Client, mem.sdfsPeers)}
	s, err := NewScheduler(Deps{
		Name: n.Cfg.Name, RPCAddr: n.Cfg.RPCAddr(), DataDir: n.Cfg.DataDir,
		Membership: mem, Blobs: blobs, Executor: &KernelExecutor{Blobs: blobs, Threads: n.Cfg.Threads, Nice: n.Cfg.ComputeThreadNice(), Logf: n.Logger("sched")},
		Client: n.Client, Logf: n.Logger("sched"),
	}, DefaultSchedConfig(), n.RPC)
	if err != nil {
		return err
	}
	n.Add(schedComponent{s})
	return nil
}

// fdMembership is the node's failure detector as the scheduler's Membership: alive and
// suspected members count as alive (a suspect may only be slow).
type fdMembership struct{ n *Node }

func (m fdMembership) Alive() []Peer {
	if m.n.FD == nil {
		return nil
	}
	var out []Peer
	for _, x := range m.n.FD.Alive() {
		out = append(out, Peer{Name: x.Name, RPCAddr: x.RPCAddr})
	}
	return out
}

// Known counts the members the detector knows but those that left: failed ones are
// remembered for fd's RetainDead (60 s).
func (m fdMembership) Known() int {
	if m.n.FD == nil {
		return 0
	}
	k := 0
	for _, x := range m.n.FD.Members() {
		if x.State != fd.Left {
			k++
		}
	}
	return k
}

func (m fdMembership) sdfsPeers(context.Context) ([]sdfs.Peer, error) {
	var out []sdfs.Peer
	for _, p := range m.Alive() {
		out = append(out, sdfs.Peer{Name: p.Name, Addr: p.RPCAddr})
	}
	return out, nil
}

// sdfsBlobs is SDFS as the scheduler's Blobs.
type sdfsBlobs struct{ c *sdfs.Client }

func (b sdfsBlobs) Get(ctx context.Context, name string) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := b.c.Get(ctx, name, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (b sdfsBlobs) Put(ctx context.Context, name string, data []byte) error {
	_, err := b.c.Put(ctx, name, bytes.NewReader(data))
	return err
}

type schedComponent struct{ s *Scheduler }

func (c schedComponent) Name() string                { return "sched" }
func (c schedComponent) Start(context.Context) error { c.s.Start(); return nil }
func (c schedComponent) Stop() error                 { c.s.Stop(); return nil }

func (b sdfsBlobs) List(ctx context.Context, prefix string) ([]string, error) {
	fs, err := b.c.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Name
	}
	return names, nil
}
