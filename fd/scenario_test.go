package fd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScenarios runs the scripts in testdata/scenarios on the simulator. Commands, one per line
// ('#' starts a comment):
//
//	sim nodes=N [seed=S] [loss=P] [bootstrap]   start a simulation
//	run DURATION                                advance the fake clock
//	crash|restart|pause|resume|leave I...       act on nodes
//	loss P                                      change the packet loss
//	partition I,J,... | K,L,...                 cut the links between two groups
//	heal                                        remove partitions
//	detected I... within DURATION               every live node declared each failed in time (since the last crash)
//	view I=STATE ... [others=STATE]             every running node sees these states
//	seen-by I J=STATE ...                       node I sees these states
//	no-false-failures                           no failure or leave of a node that did neither
func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/scenarios/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			r := &scenario{t: t, gone: map[int]bool{}, ever: map[int]bool{}}
			for i, line := range strings.Split(string(b), "\n") {
				if j := strings.Index(line, "#"); j >= 0 {
					line = line[:j]
				}
				if fs := strings.Fields(line); len(fs) > 0 {
					if err := r.exec(fs); err != nil {
						t.Fatalf("%s:%d: %s: %v", f, i+1, strings.TrimSpace(line), err)
					}
				}
			}
		})
	}
}

type scenario struct {
	t         *testing.T
	s         *Sim
	lastCrash time.Time
	gone      map[int]bool // crashed or left on purpose, and not restarted
	ever      map[int]bool // crashed or left at some point
}

func (r *scenario) exec(fs []string) error {
	cmd, args := fs[0], fs[1:]
	if cmd != "sim" && r.s == nil {
		return fmt.Errorf("no sim yet")
	}
	switch cmd {
	case "sim":
		cfg := SimConfig{Seed: 1, Latency: time.Millisecond, Jitter: 2 * time.Millisecond}
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			var err error
			switch k {
			case "nodes":
				cfg.N, err = strconv.Atoi(v)
			case "seed":
				cfg.Seed, err = strconv.ParseUint(v, 10, 64)
			case "loss":
				cfg.Loss, err = strconv.ParseFloat(v, 64)
			case "bootstrap":
				cfg.Bootstrap = true
			default:
				err = fmt.Errorf("unknown option %q", k)
			}
			if err != nil {
				return err
			}
		}
		r.s = NewSim(cfg)
	case "run":
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return err
		}
		r.s.Run(d)
	case "crash", "restart", "pause", "resume", "leave":
		ids, err := ints(args)
		if err != nil {
			return err
		}
		for _, i := range ids {
			switch cmd {
			case "crash":
				r.s.Crash(i)
				r.gone[i], r.ever[i], r.lastCrash = true, true, r.s.Now
			case "restart":
				r.s.Restart(i)
				delete(r.gone, i)
			case "pause":
				r.s.Pause(i)
			case "resume":
				r.s.Resume(i)
			case "leave":
				r.s.Leave(i)
				r.gone[i], r.ever[i] = true, true
			}
		}
	case "loss":
		p, err := strconv.ParseFloat(args[0], 64)
		if err != nil {
			return err
		}
		r.s.SetLoss(p)
	case "partition":
		a, b, ok := strings.Cut(strings.Join(args, ""), "|")
		if !ok {
			return fmt.Errorf("want A|B")
		}
		ga, err1 := ints(strings.Split(a, ","))
		gb, err2 := ints(strings.Split(b, ","))
		if err1 != nil || err2 != nil {
			return fmt.Errorf("bad groups")
		}
		r.s.Partition(ga, gb)
	case "heal":
		r.s.Heal()
	case "detected":
		return r.detected(args)
	case "view":
		return r.view(args)
	case "seen-by":
		i, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		v := r.s.View(i)
		for _, a := range args[1:] {
			k, st, _ := strings.Cut(a, "=")
			j, err := strconv.Atoi(k)
			if err != nil {
				return err
			}
			if v[j].String() != st {
				return fmt.Errorf("node %d sees node %d %v, want %s", i, j, v[j], st)
			}
		}
	case "no-false-failures":
		for _, e := range r.s.Events {
			n := r.s.byAddr[e.Event.Member.Addr]
			if (e.Event.Kind == FailedDetected || e.Event.Kind == LeftVoluntarily) && n != nil && !r.ever[n.Index] {
				return fmt.Errorf("node %d: %v about node %d at %v", e.Observer, e.Event.Kind, n.Index, e.At)
			}
		}
	default:
		return fmt.Errorf("unknown command")
	}
	return nil
}

func (r *scenario) detected(args []string) error {
	if len(args) < 3 || args[len(args)-2] != "within" {
		return fmt.Errorf("want: detected I... within D")
	}
	limit, err := time.ParseDuration(args[len(args)-1])
	if err != nil {
		return err
	}
	ids, err := ints(args[:len(args)-2])
	if err != nil {
		return err
	}
	for _, n := range r.s.Nodes {
		if !n.Up || r.gone[n.Index] {
			continue
		}
		for _, c := range ids {
			at, ok := r.s.FirstEvent(n.Index, c, FailedDetected, r.lastCrash)
			if !ok {
				return fmt.Errorf("node %d never declared %d failed", n.Index, c)
			}
			if d := at.Sub(r.lastCrash); d > limit {
				return fmt.Errorf("node %d declared %d failed after %v", n.Index, c, d)
			}
		}
	}
	return nil
}

func (r *scenario) view(args []string) error {
	want := map[int]State{}
	var others *State
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		st, err := parseState(v)
		if err != nil {
			return err
		}
		if k == "others" {
			others = &st
			continue
		}
		i, err := strconv.Atoi(k)
		if err != nil {
			return err
		}
		want[i] = st
	}
	if others != nil {
		for i := range r.s.Nodes {
			if _, ok := want[i]; !ok {
				want[i] = *others
			}
		}
	}
	for _, n := range r.s.Nodes {
		if !n.Up || n.Paused {
			continue
		}
		v := r.s.View(n.Index)
		for i, st := range want {
			if i != n.Index && v[i] != st {
				return fmt.Errorf("node %d sees node %d %v, want %v", n.Index, i, v[i], st)
			}
		}
	}
	return nil
}

func parseState(s string) (State, error) {
	for st := Alive; st <= Left; st++ {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown state %q", s)
}

func ints(ss []string) ([]int, error) {
	var out []int
	for _, s := range ss {
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}
