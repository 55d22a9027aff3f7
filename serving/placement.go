package serving

import (
	"slices"
	"strings"
	"time"
)

// Placement is a node's record of which nodes serve which models, and the decisions to
// serve a model again on live nodes when nodes serving it die. It does no I/O and reads
// no clock: the caller feeds it surveys (what each node said it serves), the live nodes
// and the time, and carries out the moves it returns. The NodeService's placer goroutine
// owns it.
//
// Only the placer, the live node whose name sorts first, makes moves; every node keeps the
// record, so when the placer dies with replicas the next one still knows what they served.
// A dead node stays in a model's record for Grace after it was first seen dead (time for
// the placer to replace it), then non-placers forget it.
type Placement struct {
	Self  string
	Grace time.Duration // how long a non-placer remembers a dead node (10 s)
	Retry time.Duration // least time between two tries of a failed move (1 s)

	models map[string]*placed
}

type placed struct {
	req     ServeRequest         // how it is served (the first answer that named it)
	nodes   map[string]time.Time // serving nodes → zero while live, else when first seen dead
	retryAt time.Time            // no moves for this model before this (a move failed)
}

// Move asks Node to serve Req in place of Replaces, which died.
type Move struct {
	Model    string
	Node     string
	Replaces string
	Req      ServeRequest
}

// NewPlacement returns an empty record for the node named self.
func NewPlacement(self string) *Placement {
	return &Placement{Self: self, Grace: 10 * time.Second, Retry: time.Second, models: map[string]*placed{}}
}

// Survey records what node said it serves (an answer: a node that could not be asked is
// not surveyed). Models it no longer names lose it.
func (p *Placement) Survey(node string, served []ServeRequest) {
	names := map[string]bool{}
	for _, r := range served {
		names[r.Name] = true
		m := p.models[r.Name]
		if m == nil {
			m = &placed{req: r, nodes: map[string]time.Time{}}
			p.models[r.Name] = m
		}
		if m.req.SDFSName == "" {
			m.req = r
		}
		m.nodes[node] = time.Time{}
	}
	for name, m := range p.models {
		if _, ok := m.nodes[node]; ok && !names[name] {
			delete(m.nodes, node)
			if len(m.nodes) == 0 {
				delete(p.models, name)
			}
		}
	}
}

// Serving returns the nodes recorded as serving model (dead ones included), sorted.
func (p *Placement) Serving(model string) []string {
	m := p.models[model]
	if m == nil {
		return nil
	}
	var r []string
	for n := range m.nodes {
		r = append(r, n)
	}
	slices.Sort(r)
	return r
}

// ServedBy returns the models recorded as served by node, sorted.
func (p *Placement) ServedBy(node string) []string {
	var r []string
	for _, name := range p.names() {
		if _, ok := p.models[name].nodes[node]; ok {
			r = append(r, name)
		}
	}
	return r
}

// Moves notes which recorded nodes are dead at now (not in live, which includes Self) and,
// on the placer, returns one move per dead node of each model: to the live node not
// serving it that serves the fewest models (then by name), as long as there is one.
func (p *Placement) Moves(now time.Time, live []string) []Move {
	alive := map[string]bool{p.Self: true}
	for _, n := range live {
		alive[n] = true
	}
	placer := p.Self
	for n := range alive {
		if n < placer {
			placer = n
		}
	}
	load := map[string]int{}
	for n := range alive {
		load[n] = 0
	}
	for _, m := range p.models {
		for n := range m.nodes {
			if alive[n] {
				load[n]++
			}
		}
	}
	var moves []Move
	for _, name := range p.names() {
		m := p.models[name]
		var dead []string
		for n, since := range m.nodes {
			switch {
			case alive[n]:
				m.nodes[n] = time.Time{}
			case since.IsZero():
				m.nodes[n] = now
				dead = append(dead, n)
			case placer != p.Self && now.Sub(since) > p.Grace:
				delete(m.nodes, n)
			default:
				dead = append(dead, n)
			}
		}
		if len(m.nodes) == 0 {
			delete(p.models, name)
			continue
		}
		// A model loaded from no known SDFS file (served by hand) cannot be loaded elsewhere.
		if placer != p.Self || len(dead) == 0 || now.Before(m.retryAt) || m.req.SDFSName == "" {
			continue
		}
		slices.Sort(dead)
		for _, d := range dead {
			to := ""
			for n := range alive {
				if _, serves := m.nodes[n]; serves {
					continue
				}
				if to == "" || load[n] < load[to] || (load[n] == load[to] && n < to) {
					to = n
				}
			}
			if to == "" {
				break
			}
			moves = append(moves, Move{Model: name, Node: to, Replaces: d, Req: m.req})
			m.nodes[to] = time.Time{} // pending: not picked twice; Failed undoes it
			load[to]++
		}
	}
	return moves
}

// Placed records that a move succeeded: the dead node it replaces is forgotten.
func (p *Placement) Placed(mv Move) {
	if m := p.models[mv.Model]; m != nil {
		delete(m.nodes, mv.Replaces)
		m.nodes[mv.Node] = time.Time{}
	}
}

// Failed records that a move failed at now: it is tried again after Retry.
func (p *Placement) Failed(mv Move, now time.Time) {
	if m := p.models[mv.Model]; m != nil {
		delete(m.nodes, mv.Node)
		m.retryAt = now.Add(p.Retry)
	}
}

func (p *Placement) names() []string {
	r := make([]string, 0, len(p.models))
	for n := range p.models {
		r = append(r, n)
	}
	slices.SortFunc(r, strings.Compare)
	return r
}
