package sdfs

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"
)

// Peer is a live node as the store addresses it.
type Peer struct {
	Name string `json:"name"`
	Addr string `json:"addr"` // RPC address
}

// Rank orders peers for name by rendezvous (highest random weight) hashing: the first
// Replicas peers are the name's replica set. Every node computes the same order from the
// same membership, a node's departure moves only the names it held, and a join takes a
// name only when the new node ranks above one of its holders.
func Rank(name string, peers []Peer) []Peer {
	type scored struct {
		p Peer
		w uint64
	}
	s := make([]scored, len(peers))
	for i, p := range peers {
		s[i] = scored{p, weight(name, p.Name)}
	}
	sort.Slice(s, func(i, j int) bool {
		if s[i].w != s[j].w {
			return s[i].w > s[j].w
		}
		return s[i].p.Name < s[j].p.Name
	})
	out := make([]Peer, len(s))
	for i := range s {
		out[i] = s[i].p
	}
	return out
}

func weight(name, node string) uint64 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(node))
	var sum [32]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

func firstN(p []Peer, n int) []Peer {
	if len(p) < n {
		return p
	}
	return p[:n]
}
