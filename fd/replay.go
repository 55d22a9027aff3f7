package fd

import "sync"

// Replay window bounds.
const (
	replayBits       = 1024 // packets a sender may send (to anyone) while one of its packets to us is delayed
	replayMaxSenders = 4096 // senders remembered; past it the least recently heard is forgotten
)

// replayWindow remembers, per sender address, the newest session seen and which of the
// last replayBits packet numbers of that session arrived (a ring bitmap, as in RFC 6479):
// a packet is accepted once, and never from an older session. A sender forgotten (evicted,
// or this node restarted) is accepted again from whatever it sends next; its replayed
// old records are then only as harmful as any late packet, which the membership's
// incarnation rules already discard.
type replayWindow struct {
	mu      sync.Mutex
	senders map[string]*senderWindow
	clock   uint64 // counts accepted packets, for eviction
}

type senderWindow struct {
	session, top uint64
	bits         [replayBits / 64]uint64
	used         uint64
}

// accept reports whether packet seq of session from sender is new, and records it.
func (w *replayWindow) accept(sender string, session, seq uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.senders == nil {
		w.senders = map[string]*senderWindow{}
	}
	w.clock++
	s := w.senders[sender]
	if s == nil {
		if len(w.senders) >= replayMaxSenders {
			w.evict()
		}
		s = &senderWindow{session: session, top: seq}
		s.set(seq)
		s.used = w.clock
		w.senders[sender] = s
		return true
	}
	switch {
	case session < s.session:
		return false
	case session > s.session:
		*s = senderWindow{session: session, top: seq}
	case seq > s.top:
		if seq-s.top >= replayBits {
			s.bits = [replayBits / 64]uint64{}
		} else {
			for q := s.top + 1; q < seq; q++ {
				s.clear(q)
			}
		}
		s.top = seq
	case s.top-seq >= replayBits || s.has(seq):
		return false
	}
	s.set(seq)
	s.used = w.clock
	return true
}

func (s *senderWindow) set(q uint64)      { s.bits[(q/64)%(replayBits/64)] |= 1 << (q % 64) }
func (s *senderWindow) clear(q uint64)    { s.bits[(q/64)%(replayBits/64)] &^= 1 << (q % 64) }
func (s *senderWindow) has(q uint64) bool { return s.bits[(q/64)%(replayBits/64)]&(1<<(q%64)) != 0 }

// evict forgets the least recently heard sender. Called with mu held.
func (w *replayWindow) evict() {
	old, oldUse := "", uint64(0)
	for a, s := range w.senders {
		if old == "" || s.used < oldUse {
			old, oldUse = a, s.used
		}
	}
	delete(w.senders, old)
}
