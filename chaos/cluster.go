package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"idunno/client/localcluster"
	"idunno/fd"
	"idunno/node"
	"idunno/rpc"
	"idunno/sched"
)

// BasePort is every node's base port: each node has an address of its own, so they all
// use the same ports, as on real hosts.
const BasePort = 7000

// Cluster is one idunno node process per host of a Net (node i on host i). Every process it
// starts is killed by Close.
type Cluster struct {
	Net    *Net
	Dir    string
	Secret string
	Bin    string
	RPC    *rpc.Client

	cfgs  []sched.NodeConfig
	mu    sync.Mutex
	procs []*nodeProc // nil: not running
}

type nodeProc struct {
	pid  int
	done chan struct{}
}

// StartCluster starts n nodes of bin on a new Net, nodes 0-2 as introducers, and returns
// once every node sees all n alive. dir holds each node's data directory (DIR/nodeI).
func StartCluster(dir string, n int, bin string) (*Cluster, error) {
	nt, err := NewNet(n)
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 16)
	rand.Read(secret)
	c := &Cluster{Net: nt, Dir: dir, Secret: hex.EncodeToString(secret), Bin: bin, procs: make([]*nodeProc, n)}
	c.RPC = rpc.NewClient([]byte(c.Secret))
	var intro []string
	for i := 0; i < n; i++ {
		cfg := sched.NodeConfig{Name: fmt.Sprintf("node%d", i), Host: nt.Hosts[i].IP, BasePort: BasePort,
			DataDir: filepath.Join(dir, fmt.Sprintf("node%d", i)), Secret: c.Secret, Threads: 1}
		if i < 3 {
			intro = append(intro, cfg.FDAddr())
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	for i := range c.cfgs {
		c.cfgs[i].Introducers = intro
		if err := os.MkdirAll(c.cfgs[i].DataDir, 0o755); err != nil {
			c.Close()
			return nil, fmt.Errorf("chaos: %w", err)
		}
		b, _ := json.MarshalIndent(c.cfgs[i], "", "  ")
		if err := os.WriteFile(c.configPath(i), b, 0o600); err != nil {
			c.Close()
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	for i := range c.cfgs {
		if err := c.Start(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitConverged(60 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) configPath(i int) string { return filepath.Join(c.cfgs[i].DataDir, "config.json") }

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.cfgs) }

// Name is node i's name.
func (c *Cluster) Name(i int) string { return c.cfgs[i].Name }

// Index is the node named name's index (-1: none).
func (c *Cluster) Index(name string) int {
	for i, cfg := range c.cfgs {
		if cfg.Name == name {
			return i
		}
	}
	return -1
}

// RPCAddr is node i's RPC address.
func (c *Cluster) RPCAddr(i int) string { return c.cfgs[i].RPCAddr() }

// RPCAddrs are every node's RPC addresses.
func (c *Cluster) RPCAddrs() []string {
	var out []string
	for i := range c.cfgs {
		out = append(out, c.RPCAddr(i))
	}
	return out
}

// LogPath is node i's log file.
func (c *Cluster) LogPath(i int) string { return filepath.Join(c.cfgs[i].DataDir, "node.log") }

// Start starts node i's process in its namespace (it must not be running).
func (c *Cluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] != nil {
		return fmt.Errorf("chaos: %s is running", c.Name(i))
	}
	out, err := os.OpenFile(filepath.Join(c.cfgs[i].DataDir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer out.Close()
	cmd := c.Net.Command(i, c.Bin, "node", "--config", c.configPath(i))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = os.Environ()
	// Its own process group; killed with this process if the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := localcluster.StartCmd(cmd); err != nil { // see StartCmd: Pdeathsig is per thread
		return fmt.Errorf("chaos: start %s: %w", c.Name(i), err)
	}
	p := &nodeProc{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	c.procs[i] = p
	return nil
}

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	c.mu.Lock()
	p := c.procs[i]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("chaos: %s is not running", c.Name(i))
	}
	if err := syscall.Kill(p.pid, sig); err != nil {
		return fmt.Errorf("chaos: signal %s: %w", c.Name(i), err)
	}
	return nil
}

// Kill kills node i (SIGKILL; a frozen process too) and waits until it is gone.
func (c *Cluster) Kill(i int) error {
	if err := c.signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("chaos: %s did not exit after SIGKILL", c.Name(i))
	}
}

// Freeze stops node i (SIGSTOP); Thaw resumes it.
func (c *Cluster) Freeze(i int) error { return c.signal(i, syscall.SIGSTOP) }

// Thaw resumes a frozen node (SIGCONT).
func (c *Cluster) Thaw(i int) error { return c.signal(i, syscall.SIGCONT) }

// Running reports whether node i's process runs (frozen counts).
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] == nil {
		return false
	}
	select {
	case <-c.procs[i].done:
		return false
	default:
		return true
	}
}

// Close kills every node it started, then removes the network.
func (c *Cluster) Close() error {
	var errs []error
	for i := range c.procs {
		if c.Running(i) {
			errs = append(errs, c.Kill(i))
		}
	}
	if c.RPC != nil {
		c.RPC.Close()
	}
	errs = append(errs, c.Net.Close())
	return errors.Join(errs...)
}

// Status asks node i for its scheduling role (timeout: d).
func (c *Cluster) Status(i int, d time.Duration) (sched.StatusReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var r sched.StatusReply
	err := c.RPC.CallJSON(ctx, c.RPCAddr(i), "sched.status", struct{}{}, &r)
	return r, err
}

// Roles asks every running node for its status in parallel; nodes that do not answer
// within d are left out.
func (c *Cluster) Roles(d time.Duration) map[int]sched.StatusReply {
	var mu sync.Mutex
	out := map[int]sched.StatusReply{}
	var wg sync.WaitGroup
	for i := range c.cfgs {
		if !c.Running(i) {
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if r, err := c.Status(i, d); err == nil {
				mu.Lock()
				out[i] = r
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return out
}

// Coordinators are the nodes that say they coordinate, with their epochs.
func (c *Cluster) Coordinators(d time.Duration) map[int]uint64 {
	out := map[int]uint64{}
	for i, r := range c.Roles(d) {
		if r.Role == "coordinator" {
			out[i] = r.Epoch
		}
	}
	return out
}

// WaitConverged waits until every running node sees exactly the running nodes alive.
func (c *Cluster) WaitConverged(limit time.Duration) error {
	var why string
	if waitFor(limit, func() bool {
		var ok bool
		ok, why = c.converged()
		return ok
	}) {
		return nil
	}
	return fmt.Errorf("chaos: membership did not converge in %v: %s", limit, why)
}

func (c *Cluster) converged() (bool, string) {
	want := map[string]bool{}
	for i, cfg := range c.cfgs {
		if c.Running(i) {
			want[cfg.Name] = true
		}
	}
	for i := range c.cfgs {
		if !c.Running(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var r node.MembersReply
		err := c.RPC.CallJSON(ctx, c.RPCAddr(i), "fd.members", struct{}{}, &r)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", c.Name(i), err)
		}
		var alive []string
		for _, m := range r.Members {
			if m.State == fd.Suspect {
				return false, fmt.Sprintf("%s suspects %s", c.Name(i), m.Name)
			}
			if m.State == fd.Alive {
				if !want[m.Name] {
					return false, fmt.Sprintf("%s sees %s alive", c.Name(i), m.Name)
				}
				alive = append(alive, m.Name)
			}
		}
		if len(alive) != len(want) {
			return false, fmt.Sprintf("%s sees %s alive, want %d nodes", c.Name(i), strings.Join(alive, ","), len(want))
		}
	}
	return true, ""
}
