package sched

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"idunno/rpc"
)

// benchCoordinator makes a coordinator with (or without) a standby on loopback RPC.
func benchCoordinator(b *testing.B, standby bool) *Scheduler {
	mem := NewStaticMembership()
	blobs := NewMemBlobs()
	exec := &FakeExecutor{Datasets: map[string]int{"d": MaxTasks}, Models: map[string]time.Duration{"m": 0}}
	var nodes []*Scheduler
	n := 1
	if standby {
		n = 2
	}
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := rpc.NewServer(testSecret)
		cli := rpc.NewClient(testSecret)
		name := fmt.Sprintf("node%d", i)
		s, err := NewScheduler(Deps{Name: name, RPCAddr: ln.Addr().String(), DataDir: b.TempDir(), Membership: mem,
			Blobs: blobs, Executor: exec, Client: cli}, DefaultSchedConfig(), srv)
		if err != nil {
			b.Fatal(err)
		}
		go srv.Serve(ln)
		b.Cleanup(func() { s.Stop(); srv.Close(); cli.Close() })
		mem.Set(Peer{Name: name, RPCAddr: ln.Addr().String()}, true)
		nodes = append(nodes, s)
	}
	s := nodes[0]
	s.mu.Lock()
	s.takeOver("benchmark")
	s.coordTick(mem.Alive(), map[string]string{})
	s.commit(&Entry{Kind: EntryPhase, Phase: PhaseInference})
	s.mu.Unlock()
	if by, err := s.confirm(context.Background()); err != nil || (standby && by != "node1") {
		b.Fatalf("standby not synced: %q %v", by, err)
	}
	return s
}

func benchPerTask(b *testing.B, standby bool) {
	s := benchCoordinator(b, standby)
	job := 0
	addJob := func() {
		job++
		spec := JobSpec{Name: fmt.Sprintf("j%d", job), Model: "m", Data: "d", Batch: 1, TaskSize: 1, Queries: MaxTasks}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.commit(&Entry{Kind: EntryJobAdd, Job: &spec}); err != nil {
			b.Fatal(err)
		}
		s.coreAdd(s.st.Jobs[spec.Name])
		s.control(s.now())
	}
	addJob()
	var done []TaskReport
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, _, err := s.handlePull(s.st.Epoch, PullArgs{Worker: "w", Want: 1, Done: done})
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Orders) == 0 {
			b.StopTimer()
			addJob()
			b.StartTimer()
			done = nil
			continue
		}
		o := r.Orders[0]
		done = []TaskReport{{Job: o.Spec.Name, JobID: o.Spec.ID, Task: o.Task, Worker: "w", Queries: 1, BusyNanos: 1000, BatchUS: []int64{1}}}
	}
	// Replication runs beside the pulls: the time counts until the standby holds every entry.
	if _, err := s.confirm(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCoordinatorPerTask is the coordinator's work for one task: lease it, then
// commit its completion (journal on disk) and record its stats, in one worker pull.
func BenchmarkCoordinatorPerTask(b *testing.B) { benchPerTask(b, false) }

// BenchmarkCoordinatorPerTaskWithStandby adds the replication of the completions to a hot
// standby over loopback RPC (batched, outside the scheduler's mutex; the time runs until the
// standby holds the last one).
func BenchmarkCoordinatorPerTaskWithStandby(b *testing.B) { benchPerTask(b, true) }
