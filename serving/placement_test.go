package serving

import (
	"fmt"
	"testing"
	"time"
)

func req(name string) ServeRequest {
	return ServeRequest{ServedModel: ServedModel{Name: name}, SDFSName: name + ".onnx"}
}

func moveStrings(ms []Move) []string {
	var r []string
	for _, m := range ms {
		r = append(r, fmt.Sprintf("%s:%s->%s", m.Model, m.Replaces, m.Node))
	}
	return r
}

func TestPlacementReplacesDeadReplicasOnLeastLoadedNodes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPlacement("node0")
	p.Survey("node0", nil)
	p.Survey("node1", []ServeRequest{req("a"), req("b")})
	p.Survey("node2", []ServeRequest{req("a")})
	p.Survey("node3", []ServeRequest{req("c")})
	all := []string{"node0", "node1", "node2", "node3"}
	if ms := p.Moves(t0, all); len(ms) != 0 {
		t.Fatalf("nothing died, moves %v", moveStrings(ms))
	}
	// node1 dies: a goes to node0 (serves nothing; node2 and node3 serve one each), then b
	// too (node0, node2 and node3 serve one each now: node0 sorts first).
	ms := p.Moves(t0.Add(time.Second), []string{"node0", "node2", "node3"})
	got := fmt.Sprint(moveStrings(ms))
	if got != "[a:node1->node0 b:node1->node0]" {
		t.Fatalf("moves %s", got)
	}
	if ms[0].Req.SDFSName != "a.onnx" {
		t.Fatalf("move carries %+v", ms[0].Req)
	}
	for _, m := range ms {
		p.Placed(m)
	}
	if ms := p.Moves(t0.Add(2*time.Second), []string{"node0", "node2", "node3"}); len(ms) != 0 {
		t.Fatalf("placed already, moves again: %v", moveStrings(ms))
	}
	if got := fmt.Sprint(p.Serving("a"), p.Serving("b")); got != "[node0 node2] [node0]" {
		t.Fatalf("serving %s", got)
	}
}

func TestPlacementOnlyThePlacerMovesAndOthersForgetAfterGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPlacement("node2")
	p.Survey("node1", []ServeRequest{req("a")})
	p.Survey("node2", []ServeRequest{req("a")})
	if ms := p.Moves(t0, []string{"node0", "node2"}); len(ms) != 0 {
		t.Fatalf("node2 is not the placer (node0 is), yet moves %v", moveStrings(ms))
	}
	// node0 (the placer) dies within the grace: node2 is the placer now and replaces node1.
	ms := p.Moves(t0.Add(3*time.Second), []string{"node2", "node3"})
	if got := fmt.Sprint(moveStrings(ms)); got != "[a:node1->node3]" {
		t.Fatalf("successor placer moves %s", got)
	}
	// A non-placer forgets a dead node after the grace.
	q := NewPlacement("node2")
	q.Survey("node1", []ServeRequest{req("a")})
	q.Survey("node2", []ServeRequest{req("a")})
	q.Moves(t0, []string{"node0", "node2"})
	q.Moves(t0.Add(q.Grace+time.Second), []string{"node0", "node2"})
	if got := fmt.Sprint(q.Serving("a")); got != "[node2]" {
		t.Fatalf("after the grace node2 records %s", got)
	}
}

func TestPlacementFailedMoveWaitsAndNoCandidateNoMove(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPlacement("node0")
	p.Survey("node1", []ServeRequest{req("a")})
	ms := p.Moves(t0, []string{"node0"})
	if len(ms) != 1 || ms[0].Node != "node0" {
		t.Fatalf("moves %v", moveStrings(ms))
	}
	p.Failed(ms[0], t0)
	if ms := p.Moves(t0.Add(p.Retry/2), []string{"node0"}); len(ms) != 0 {
		t.Fatalf("retried too soon: %v", moveStrings(ms))
	}
	if ms := p.Moves(t0.Add(2*p.Retry), []string{"node0"}); len(ms) != 1 {
		t.Fatalf("not retried: %v", moveStrings(ms))
	}
	// Every live node already serves it: nothing to do.
	q := NewPlacement("node0")
	q.Survey("node0", []ServeRequest{req("a")})
	q.Survey("node1", []ServeRequest{req("a")})
	if ms := q.Moves(t0, []string{"node0"}); len(ms) != 0 {
		t.Fatalf("no free node, yet moves %v", moveStrings(ms))
	}
	// A node that stops naming a model is no longer recorded as serving it.
	q.Survey("node0", nil)
	if got := fmt.Sprint(q.Serving("a")); got != "[node1]" {
		t.Fatalf("serving %s", got)
	}
}
