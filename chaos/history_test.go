package chaos

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

func kinds(s Summary) []string {
	var out []string
	for _, a := range s.Anomalies {
		out = append(out, a.Kind+" "+a.Key)
	}
	return out
}

func TestCheck(t *testing.T) {
	ref := []byte("query,top1,score\n0,3,0.5\n1,7,0.25\n")
	dupRes := []byte("query,top1,score\n0,3,0.5\n0,3,0.5\n")
	put := func(key, content string, o Outcome) Op {
		return Op{Kind: OpPut, Key: key, Hash: Hash([]byte(content)), Outcome: o}
	}
	add := func(key string, o Outcome) Op { return Op{Kind: OpJobAdd, Key: key, Outcome: o} }
	done := func(res []byte) JobState {
		return JobState{Present: true, Copies: 1, Complete: true, Queries: 2, Result: res}
	}
	cases := []struct {
		name string
		ops  []Op
		obs  Observed
		want []string
	}{
		{"acked put present", []Op{put("a", "x", Acked)},
			Observed{Files: map[string]FileState{"a": {Present: true, Hash: Hash([]byte("x"))}}}, nil},
		{"acked put missing is lost", []Op{put("a", "x", Acked)}, Observed{}, []string{"lost a"}},
		{"acked put unreadable is lost", []Op{put("a", "x", Acked)},
			Observed{Files: map[string]FileState{"a": {Err: "no quorum"}}}, []string{"lost a"}},
		{"unknown put may be missing", []Op{put("a", "x", Unknown)}, Observed{}, nil},
		{"unknown put with other bytes is corrupt", []Op{put("a", "x", Unknown)},
			Observed{Files: map[string]FileState{"a": {Present: true, Hash: Hash([]byte("y"))}}}, []string{"corrupt a"}},
		{"acked job complete and right", []Op{add("j", Acked)},
			Observed{Jobs: map[string]JobState{"j": done(ref)}, Reference: map[string][]byte{"j": ref}}, nil},
		{"acked job missing is lost", []Op{add("j", Acked)}, Observed{}, []string{"lost j"}},
		{"refused job missing is fine", []Op{add("j", Refused)}, Observed{}, nil},
		{"refused job present is an anomaly", []Op{add("j", Refused)},
			Observed{Jobs: map[string]JobState{"j": done(ref)}, Reference: map[string][]byte{"j": ref}}, []string{"refused-applied j"}},
		{"job listed twice is duplicated", []Op{add("j", Acked)},
			Observed{Jobs: map[string]JobState{"j": {Present: true, Copies: 2, Complete: true, Queries: 2, Result: ref}}}, []string{"duplicated j"}},
		{"a query answered twice", []Op{add("j", Acked)},
			Observed{Jobs: map[string]JobState{"j": done(dupRes)}, Reference: map[string][]byte{"j": ref}},
			[]string{"duplicated j", "lost j", "wrong-result j"}},
		{"a result unlike the reference", []Op{add("j", Acked)},
			Observed{Jobs: map[string]JobState{"j": done([]byte("query,top1,score\n0,3,0.5\n1,2,0.25\n"))}, Reference: map[string][]byte{"j": ref}},
			[]string{"wrong-result j"}},
		{"a job that never completes", []Op{add("j", Acked)},
			Observed{Jobs: map[string]JobState{"j": {Present: true, Copies: 1}}}, []string{"incomplete j"}},
		{"two coordinators in one epoch", nil,
			Observed{Claims: []EpochClaim{{Node: "node0", Epoch: 1}, {Node: "node1", Epoch: 2}, {Node: "node2", Epoch: 2}}},
			[]string{"split-brain epoch 2"}},
		{"one node claiming an epoch twice (a restart) is fine", nil,
			Observed{Claims: []EpochClaim{{Node: "node0", Epoch: 1}, {Node: "node0", Epoch: 1}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := kinds(Check(tc.ops, tc.obs))
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("anomalies %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckCountsUnknownApplied(t *testing.T) {
	ops := []Op{{Kind: OpPut, Key: "a", Hash: Hash([]byte("x")), Outcome: Unknown}, {Kind: OpPut, Key: "b", Outcome: Acked, Hash: Hash(nil)}}
	s := Check(ops, Observed{Files: map[string]FileState{"a": {Present: true, Hash: Hash([]byte("x"))}, "b": {Present: true, Hash: Hash(nil)}}})
	if s.Puts != 2 || s.PutsAcked != 1 || s.PutsUnknown != 1 || s.UnknownApplied != 1 || len(s.Anomalies) != 0 {
		t.Fatalf("summary %s", s)
	}
}

func TestParseClaims(t *testing.T) {
	log := "2026-11-23T22:36:33.822Z node0 sched: sched: became coordinator, epoch 1 (no coordinator among the live nodes); 0 jobs in the journal\n" +
		"2026-11-23T22:36:33.829Z node0 sched: sched: following coordinator node1 (epoch 2)\n" +
		"garbage sched: became coordinator, epoch x\n" +
		"2026-11-23T22:37:01.969Z node0 sched: sched: became coordinator, epoch 14 (standby of failed coordinator node3); 21 jobs in the journal\n"
	got := ParseClaims("node0", []byte(log))
	if len(got) != 2 || got[0].Epoch != 1 || got[1].Epoch != 14 || got[1].Node != "node0" {
		t.Fatalf("claims %+v", got)
	}
	if want := time.Date(2026, 11, 23, 22, 37, 1, 969e6, time.UTC); !got[1].At.Equal(want) {
		t.Fatalf("time %v, want %v", got[1].At, want)
	}
}

func TestFirstAfter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ops := []Op{
		{Kind: OpPut, Start: at(-1), End: at(0.1), Outcome: Acked},     // started before: not counted
		{Kind: OpPut, Start: at(0.2), End: at(3), Outcome: Unknown},    // failed
		{Kind: OpPut, Start: at(0.5), End: at(2.5), Outcome: Acked},    // the first
		{Kind: OpPut, Start: at(1), End: at(2.7), Outcome: Acked},      // later
		{Kind: OpJobAdd, Start: at(0.3), End: at(0.4), Outcome: Acked}, // another kind
	}
	if d, ok := FirstAfter(ops, OpPut, t0); !ok || d != 2500*time.Millisecond {
		t.Fatalf("first put after %v %v, want 2.5s", d, ok)
	}
	if _, ok := FirstAfter(ops, OpPut, at(5)); ok {
		t.Fatal("an op after the end")
	}
}

// TestNetTeardown builds a two-host network, cuts and heals a link, and checks that
// Close leaves no namespace, veth or bridge behind.
func TestNetTeardown(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("cannot create network namespaces here: %v", err)
	}
	nt, err := NewNet(2)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{nt.Hosts[0].NS, nt.Hosts[1].NS, nt.Hosts[0].Veth, nt.bridge}
	if err := nt.CutOneWay(0, 1); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "-n", nt.Hosts[0].NS, "neigh", "show", nt.Hosts[1].IP).Output()
	if !strings.Contains(string(out), "02:77:00:00:00:01") || !strings.Contains(string(out), "PERMANENT") {
		t.Errorf("after the cut, %s's neighbour entry for %s is %q", nt.Hosts[0].NS, nt.Hosts[1].IP, out)
	}
	if err := nt.LinkDown(1); err != nil {
		t.Fatal(err)
	}
	if err := nt.Heal(); err != nil {
		t.Fatal(err)
	}
	out, _ = exec.Command("ip", "-n", nt.Hosts[0].NS, "neigh", "show", nt.Hosts[1].IP).Output()
	if strings.Contains(string(out), "02:77") {
		t.Errorf("after healing, the entry is %q", out)
	}
	if out, _ := exec.Command("ip", "link", "show", nt.Hosts[1].Veth).Output(); !strings.Contains(string(out), "UP") {
		t.Errorf("after healing, %s is %q", nt.Hosts[1].Veth, out)
	}
	if err := nt.Close(); err != nil {
		t.Fatal(err)
	}
	ns, _ := exec.Command("ip", "netns", "list").Output()
	links, _ := exec.Command("ip", "link", "show").Output()
	for _, n := range names {
		if strings.Contains(string(ns), n) || strings.Contains(string(links), n+":") || strings.Contains(string(links), n+"@") {
			t.Errorf("%s is left after Close", n)
		}
	}
}
