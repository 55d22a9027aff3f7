package node

import (
	"bytes"
	"context"

	"idunno/fd"
	"idunno/sched"
	"idunno/sdfs"
	"idunno/serving"
)

// The node's failure detector as each subsystem wants to see the membership. Before Run
// starts the detector they all see no one.

// storeMembership is the detector as the SDFS store's Membership.
type storeMembership struct{ n *Node }

func (m storeMembership) Members() []fd.Member {
	if d := m.n.fd.Load(); d != nil {
		return d.Members()
	}
	return nil
}

func (m storeMembership) Subscribe(buf int) (<-chan fd.Event, func()) {
	if d := m.n.fd.Load(); d != nil {
		return d.Subscribe(buf)
	}
	return nil, func() {}
}

// alive returns the alive and suspected members (a suspect may only be slow).
func (n *Node) alive() []fd.Member {
	if d := n.fd.Load(); d != nil {
		return d.Alive()
	}
	return nil
}

// schedMembership is the detector as the scheduler's Membership.
type schedMembership struct{ n *Node }

func (m schedMembership) Alive() []sched.Peer {
	var out []sched.Peer
	for _, x := range m.n.alive() {
		out = append(out, sched.Peer{Name: x.Name, RPCAddr: x.RPCAddr})
	}
	return out
}

// Known counts the members the detector knows but those that left: failed ones are
// remembered for fd's RetainDead (60 s). The scheduler's majority rule divides by it.
func (m schedMembership) Known() int {
	d := m.n.fd.Load()
	if d == nil {
		return 0
	}
	k := 0
	for _, x := range d.Members() {
		if x.State != fd.Left {
			k++
		}
	}
	return k
}

// Failed names the members the detector holds failed and has not forgotten.
func (m schedMembership) Failed() []string {
	d := m.n.fd.Load()
	if d == nil {
		return nil
	}
	var out []string
	for _, x := range d.Members() {
		if x.State == fd.Failed {
			out = append(out, x.Name)
		}
	}
	return out
}

// sdfsPeers is the detector as an SDFS client's member source.
func (n *Node) sdfsPeers(context.Context) ([]sdfs.Peer, error) {
	var out []sdfs.Peer
	for _, x := range n.alive() {
		out = append(out, sdfs.Peer{Name: x.Name, Addr: x.RPCAddr})
	}
	return out, nil
}

// httpPeers lists the live members other than this node for the HTTP router.
type httpPeers struct{ n *Node }

func (p httpPeers) Peers() []serving.Peer {
	var r []serving.Peer
	for _, m := range p.n.alive() {
		if m.Name != p.n.cfg.Name {
			r = append(r, serving.Peer{Name: m.Name, RPCAddr: m.RPCAddr})
		}
	}
	return r
}

// httpGauges reads the membership size from the detector and the bytes stored and the
// replication backlog from this node's SDFS store.
type httpGauges struct{ n *Node }

func (g httpGauges) Gauges() serving.ClusterGauges {
	r := serving.ClusterGauges{Members: len(g.n.alive())}
	_, r.SDFSBytesStored = g.n.store.Usage()
	r.ReplicationBacklog = g.n.store.Backlog()
	return r
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

// PutResult writes a task's result in one round to its replicas, not fsynced: it is
// durable by its 4 replicas, as the coordinator's journal is by its standby (see
// sdfs.Client.PutImmutable).
func (b sdfsBlobs) PutResult(ctx context.Context, name string, data []byte) error {
	return b.c.PutImmutable(ctx, name, data, false)
}

// GetResult reads a task's result from the first replica that returns it whole (see
// sdfs.Client.GetImmutable).
func (b sdfsBlobs) GetResult(ctx context.Context, name string) ([]byte, error) {
	return b.c.GetImmutable(ctx, name)
}

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
