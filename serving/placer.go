package serving

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

var errNoSuchPeer = errors.New("serving: no such live node")

// The placer's timing: how often it looks at the live nodes, and how often it asks them
// what they serve (also whenever the live nodes change).
const (
	placeTick   = 200 * time.Millisecond
	surveyEvery = time.Second
	moveTimeout = 30 * time.Second
)

// place runs the node's placer until Stop: it keeps a Placement up to date with what the
// live nodes serve and, on the placer node, serves the models of dead nodes again.
func (s *NodeService) place() {
	defer s.wg.Done()
	if s.o.Config.Node == "" || s.o.Peers == nil || s.o.Client == nil {
		return
	}
	p := NewPlacement(s.o.Config.Node)
	tick := time.NewTicker(placeTick)
	defer tick.Stop()
	var surveyed time.Time
	var lastLive []string
	for {
		select {
		case <-s.stop:
			return
		case h := <-s.hints: // a peer's served models changed
			p.Survey(h.Node, h.Served)
			continue
		case <-s.changed: // this node's served models changed: tell the others at once
			s.announce(p)
			continue
		case <-tick.C:
		}
		peers := s.o.Peers.Peers()
		live := make([]string, 0, len(peers))
		for _, q := range peers {
			live = append(live, q.Name)
		}
		slices.Sort(live)
		if lastLive != nil {
			s.noteMembers(p, lastLive, live)
		}
		if now := time.Now(); now.Sub(surveyed) >= surveyEvery || !slices.Equal(live, lastLive) {
			s.survey(p, peers)
			surveyed, lastLive = now, live
		}
		for _, mv := range p.Moves(time.Now(), live) {
			s.logf("http: %s died: serving %s again on %s", mv.Replaces, mv.Model, mv.Node)
			if err := s.carry(mv, peers); err != nil {
				s.logf("http: serve %s on %s: %v (will retry)", mv.Model, mv.Node, err)
				s.event("placement failed", mv.Model+" on "+mv.Node+": "+err.Error())
				p.Failed(mv, time.Now())
				continue
			}
			s.event("placed again", mv.Model+" on "+mv.Node+" (replaces "+mv.Replaces+")")
			p.Placed(mv)
		}
	}
}

// servedHint is the http.placed message: the models a node serves now.
type servedHint struct {
	Node   string         `json:"node"`
	Served []ServeRequest `json:"served"`
}

// hint hands a peer's http.placed message to the placer; a full queue drops it (the next
// survey brings the same news).
func (s *NodeService) hint(h servedHint) {
	select {
	case s.hints <- h:
	default:
	}
}

// noteChanged tells the placer that this node's served models changed.
func (s *NodeService) noteChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// announce records what this node serves and sends it to every live peer (in parallel,
// each call bounded), so a model served a moment before its node dies is still known.
func (s *NodeService) announce(p *Placement) {
	h := servedHint{Node: s.o.Config.Node, Served: s.servedNow()}
	p.Survey(h.Node, h.Served)
	peers := s.o.Peers.Peers()
	var wg sync.WaitGroup
	for _, q := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := s.o.Client.CallJSON(ctx, q.RPCAddr, MethodPlaced, h, nil); err != nil {
				s.logf("http: tell %s what this node serves: %v", q.Name, err)
			}
		}()
	}
	wg.Wait()
}

// servedNow lists the models this node serves, with their SDFS files.
func (s *NodeService) servedNow() []ServeRequest {
	var mine []ServeRequest
	for _, m := range s.local.Served() {
		mine = append(mine, ServeRequest{ServedModel: m, SDFSName: s.sdfsName(m.Name)})
	}
	return mine
}

// survey asks this node and every live peer what they serve (peers in parallel, each
// call bounded); a peer that does not answer is left as recorded.
func (s *NodeService) survey(p *Placement, peers []Peer) {
	type answer struct {
		node string
		reqs []ServeRequest
		err  error
	}
	ch := make(chan answer, len(peers))
	for _, q := range peers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var ms []RemoteModel
			err := s.o.Client.CallJSON(ctx, q.RPCAddr, MethodModels, struct{}{}, &ms)
			reqs := make([]ServeRequest, 0, len(ms))
			for _, m := range ms {
				reqs = append(reqs, ServeRequest{ServedModel: m.Served, SDFSName: m.SDFSName})
			}
			ch <- answer{q.Name, reqs, err}
		}()
	}
	p.Survey(s.o.Config.Node, s.servedNow())
	for range peers {
		if a := <-ch; a.err == nil {
			p.Survey(a.node, a.reqs)
		}
	}
}

// carry makes mv.Node serve the model: this node loads it itself, another is asked.
func (s *NodeService) carry(mv Move, peers []Peer) error {
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	if mv.Node == s.o.Config.Node {
		if err := s.load(ctx, mv.Req); err != nil {
			return err
		}
		return s.local.Serve(mv.Req.ServedModel)
	}
	for _, q := range peers {
		if q.Name == mv.Node {
			_, err := Serve(ctx, s.o.Client, q.RPCAddr, mv.Req)
			return err
		}
	}
	return errNoSuchPeer
}

// noteMembers records the nodes that left or joined the live set as events.
func (s *NodeService) noteMembers(p *Placement, before, now []string) {
	for _, n := range before {
		if !slices.Contains(now, n) {
			s.logf("http: %s left the live nodes (it served %v)", n, p.ServedBy(n))
			s.event("node failed", n)
		}
	}
	for _, n := range now {
		if !slices.Contains(before, n) {
			s.event("node joined", n)
		}
	}
}

func (s *NodeService) event(kind, detail string) { s.srv.Events.Add(time.Now(), kind, detail) }
