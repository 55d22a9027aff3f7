package chaos

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpKind is what a client asked the cluster to do.
type OpKind string

const (
	OpPut    OpKind = "put"     // an SDFS write of one file under a name of its own
	OpJobAdd OpKind = "job-add" // an inference job add (named uniquely)
)

// Outcome is what the client was told.
type Outcome int

const (
	// Unknown: the call failed in a way that leaves the change possibly made (a timeout,
	// a lost reply, "may or may not have been made"). Either state afterwards is correct.
	Unknown Outcome = iota
	// Acked: the cluster said the change was made. It must be there afterwards.
	Acked
	// Refused: the cluster said the change was not made (a validation error).
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Op is one client operation as the client saw it.
type Op struct {
	Kind    OpKind
	Key     string // SDFS name or job name
	Hash    string // put: hex SHA-256 of the bytes written
	Start   time.Time
	End     time.Time
	Outcome Outcome
	Err     string // the client's error, if any
	Via     string // the node that answered (or was last tried)
}

// History is every client's operations, in the order they finished. Safe for concurrent use.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records a finished operation.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the operations.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Hash is the content hash the history records for written bytes.
func Hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// FileState is what SDFS returned for a name afterwards.
type FileState struct {
	Present bool
	Hash    string // of the bytes read
	Err     string // the read failed for another reason than absence
}

// JobState is what the coordinator holds for a job afterwards.
type JobState struct {
	Present  bool
	Copies   int // jobs of that name the cluster lists (more than 1: applied twice)
	Complete bool
	Queries  int
	Result   []byte // the result CSV, when complete and read
	Err      string
}

// EpochClaim is a node saying it became coordinator of an epoch (from its log or journal).
type EpochClaim struct {
	Node  string
	Epoch uint64
	At    time.Time
}

// Observed is what the cluster holds after the run.
type Observed struct {
	Files map[string]FileState
	Jobs  map[string]JobState
	// Reference is the failure-free result CSV of each job (by job name).
	Reference map[string][]byte
	Claims    []EpochClaim
}

// Anomaly is one way the cluster broke a promise.
type Anomaly struct {
	Kind string // lost, corrupt, duplicated, wrong-result, incomplete, refused-applied, split-brain
	Key  string
	What string
}

func (a Anomaly) String() string { return fmt.Sprintf("%s %s: %s", a.Kind, a.Key, a.What) }

// Summary counts what the checker saw.
type Summary struct {
	Puts, PutsAcked, PutsUnknown int
	Adds, AddsAcked, AddsUnknown int
	UnknownApplied               int // operations of unknown outcome found applied
	Epochs                       int
	Anomalies                    []Anomaly
}

func (s Summary) String() string {
	return fmt.Sprintf("puts %d (acked %d, unknown %d), job adds %d (acked %d, unknown %d), %d unknown found applied, %d coordinator epochs, %d anomalies",
		s.Puts, s.PutsAcked, s.PutsUnknown, s.Adds, s.AddsAcked, s.AddsUnknown, s.UnknownApplied, s.Epochs, len(s.Anomalies))
}

// Check compares what clients were told with what the cluster holds: an acknowledged write
// or job that is missing is lost; a file with other bytes than any write of it is corrupt;
// a job listed twice, or a result with a query twice, is duplicated; a result that differs
// from the failure-free reference is wrong; two nodes claiming one epoch is split brain.
// Operations of unknown outcome may be present or absent, but what is present must be
// right.
func Check(ops []Op, obs Observed) Summary {
	var s Summary
	for _, op := range ops {
		switch op.Kind {
		case OpPut:
			s.Puts++
			switch op.Outcome {
			case Acked:
				s.PutsAcked++
			case Unknown:
				s.PutsUnknown++
			}
			s.Anomalies = append(s.Anomalies, checkPut(op, obs.Files[op.Key], &s)...)
		case OpJobAdd:
			s.Adds++
			switch op.Outcome {
			case Acked:
				s.AddsAcked++
			case Unknown:
				s.AddsUnknown++
			}
			s.Anomalies = append(s.Anomalies, checkJob(op, obs.Jobs[op.Key], obs.Reference[op.Key], &s)...)
		}
	}
	byEpoch := map[uint64]map[string]bool{}
	for _, c := range obs.Claims {
		if byEpoch[c.Epoch] == nil {
			byEpoch[c.Epoch] = map[string]bool{}
		}
		byEpoch[c.Epoch][c.Node] = true
	}
	s.Epochs = len(byEpoch)
	var epochs []uint64
	for e := range byEpoch {
		epochs = append(epochs, e)
	}
	sort.Slice(epochs, func(i, j int) bool { return epochs[i] < epochs[j] })
	for _, e := range epochs {
		if len(byEpoch[e]) > 1 {
			var nodes []string
			for n := range byEpoch[e] {
				nodes = append(nodes, n)
			}
			sort.Strings(nodes)
			s.Anomalies = append(s.Anomalies, Anomaly{"split-brain", fmt.Sprintf("epoch %d", e),
				"coordinated by " + strings.Join(nodes, " and ")})
		}
	}
	return s
}

func checkPut(op Op, f FileState, s *Summary) []Anomaly {
	switch {
	case f.Err != "":
		if op.Outcome == Acked {
			return []Anomaly{{"lost", op.Key, "acked write unreadable: " + f.Err}}
		}
	case !f.Present:
		if op.Outcome == Acked {
			return []Anomaly{{"lost", op.Key, "acked write missing"}}
		}
	case f.Hash != op.Hash:
		return []Anomaly{{"corrupt", op.Key, fmt.Sprintf("holds %.12s, the write (%s) was %.12s", f.Hash, op.Outcome, op.Hash)}}
	default:
		if op.Outcome != Acked {
			s.UnknownApplied++
		}
	}
	return nil
}

func checkJob(op Op, j JobState, ref []byte, s *Summary) []Anomaly {
	var out []Anomaly
	if j.Err != "" && op.Outcome == Acked {
		return []Anomaly{{"lost", op.Key, "acked job unreadable: " + j.Err}}
	}
	if !j.Present {
		if op.Outcome == Acked {
			out = append(out, Anomaly{"lost", op.Key, "acked job missing"})
		}
		return out
	}
	switch op.Outcome {
	case Refused:
		// The client was told the job was not added (e.g. "already in use" for its own
		// retry): it will not wait for, or trust, a job that runs anyway.
		out = append(out, Anomaly{"refused-applied", op.Key, "refused (" + op.Err + ") but the job exists"})
	case Unknown:
		s.UnknownApplied++
	}
	if j.Copies > 1 {
		out = append(out, Anomaly{"duplicated", op.Key, fmt.Sprintf("the job is listed %d times", j.Copies)})
	}
	if !j.Complete {
		return append(out, Anomaly{"incomplete", op.Key, "job never completed"})
	}
	if dup, missing, err := resultQueries(j.Result, j.Queries); err != nil {
		out = append(out, Anomaly{"wrong-result", op.Key, err.Error()})
	} else {
		if len(dup) > 0 {
			out = append(out, Anomaly{"duplicated", op.Key, fmt.Sprintf("queries %v answered more than once", dup)})
		}
		if len(missing) > 0 {
			out = append(out, Anomaly{"lost", op.Key, fmt.Sprintf("queries %v have no answer", missing)})
		}
	}
	if ref != nil && !bytes.Equal(j.Result, ref) {
		out = append(out, Anomaly{"wrong-result", op.Key, "result differs from the failure-free reference " + firstDiff(j.Result, ref)})
	}
	return out
}

// resultQueries reads a result CSV (header, then "query,top1,score" lines) and returns the
// query ids seen more than once and those of 0..n-1 never seen (each list at most 10 long).
func resultQueries(csv []byte, n int) (dup, missing []int, err error) {
	sc := bufio.NewScanner(bytes.NewReader(csv))
	seen := make([]int, n)
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			continue
		}
		q, _, ok := strings.Cut(sc.Text(), ",")
		id, err := strconv.Atoi(q)
		if !ok || err != nil || id < 0 || id >= n {
			return nil, nil, fmt.Errorf("result line %d is %q (want a query id in 0..%d)", line, sc.Text(), n-1)
		}
		seen[id]++
	}
	for id, k := range seen {
		if k > 1 && len(dup) < 10 {
			dup = append(dup, id)
		}
		if k == 0 && len(missing) < 10 {
			missing = append(missing, id)
		}
	}
	return dup, missing, nil
}

func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < min(len(la), len(lb)); i++ {
		if la[i] != lb[i] {
			return fmt.Sprintf("(line %d: %q, reference %q)", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("(%d lines, reference %d)", len(la), len(lb))
}

// ParseClaims reads "became coordinator, epoch N" lines from one node's log.
func ParseClaims(node string, log []byte) []EpochClaim {
	var out []EpochClaim
	const key = "sched: became coordinator, epoch "
	for _, l := range strings.Split(string(log), "\n") {
		i := strings.Index(l, key)
		if i < 0 {
			continue
		}
		rest := l[i+len(key):]
		j := strings.IndexAny(rest, " ,")
		if j < 0 {
			j = len(rest)
		}
		e, err := strconv.ParseUint(rest[:j], 10, 64)
		if err != nil {
			continue
		}
		c := EpochClaim{Node: node, Epoch: e}
		if sp := strings.IndexByte(l, ' '); sp > 0 {
			c.At, _ = time.Parse("2006-01-02T15:04:05.000Z07:00", l[:sp])
		}
		out = append(out, c)
	}
	return out
}

// FirstAfter returns how long after t the first operation of kind that started at or
// after t was acknowledged (false: none was).
func FirstAfter(ops []Op, kind OpKind, t time.Time) (time.Duration, bool) {
	best := time.Duration(-1)
	for _, op := range ops {
		if op.Kind == kind && op.Outcome == Acked && !op.Start.Before(t) {
			if d := op.End.Sub(t); best < 0 || d < best {
				best = d
			}
		}
	}
	return best, best >= 0
}
