package fd

import "fmt"

// State is what one node believes about a member.
type State int

// Member states, in the order a failing member passes through them.
const (
	Alive State = iota
	Suspect
	Failed
	Left
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Failed:
		return "failed"
	case Left:
		return "left"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Member is one node of the cluster as the local node sees it. A member's identity is its
// Addr plus Incarnation: a restarted node at the same address comes back with a higher one.
type Member struct {
	Name        string // node0, node1, ...
	Addr        string // failure detector UDP address, host:port
	RPCAddr     string // internal RPC TCP address
	HTTPAddr    string // HTTP endpoint TCP address
	Incarnation uint64
	State       State
}

// EventKind says what happened to a member.
type EventKind int

// Membership events delivered to subscribers.
const (
	Joined EventKind = iota
	LeftVoluntarily
	FailedDetected
	Suspected
	Refuted // a suspected member proved it is alive (higher incarnation)
)

func (k EventKind) String() string {
	return [...]string{"join", "leave", "fail", "suspect", "refute"}[k]
}

// Event is one membership change.
type Event struct {
	Kind   EventKind
	Member Member
}
