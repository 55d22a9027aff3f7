// Package localcluster starts and controls a cluster of IDunno node processes on 127.0.0.1,
// for tests, benchmarks, the demo and `idunno cluster`.
//
// A cluster lives in a directory: DIR/cluster.json describes it (secret, nodes, addresses,
// pids) and DIR/<name>/ is each node's data directory (config.json, node.log, stdout.log).
// Any process can Open the directory and control the nodes; processes started by this
// process are also reaped by it.
package localcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"idunno/fd"
	"idunno/node"
	"idunno/rpc"
	"idunno/sched"
)

// Node is one node of the cluster as recorded in cluster.json.
type Node struct {
	Name     string `json:"name"`
	Host     string `json:"host"`
	BasePort int    `json:"base_port"`
	FDAddr   string `json:"fd_addr"`
	RPCAddr  string `json:"rpc_addr"`
	HTTPAddr string `json:"http_addr"`
	DataDir  string `json:"data_dir"`
	PID      int    `json:"pid"`
}

// file is the content of DIR/cluster.json.
type file struct {
	Secret   string `json:"secret"`
	BasePort int    `json:"base_port"`
	Bin      string `json:"bin"`
	Nodes    []Node `json:"nodes"`
}

// Cluster controls the node processes recorded in one directory.
type Cluster struct {
	dir string

	mu    sync.Mutex
	f     file
	procs map[string]*proc // processes this process started and reaps
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// ConvergeTimeout bounds how long Up and Restart wait for membership to converge.
var ConvergeTimeout = 60 * time.Second

// DieWithParent makes node processes started by this process get SIGKILL when it dies, so a
// test killed by its timeout leaves no nodes behind. `idunno cluster up` turns it off: its
// nodes must outlive the command.
var DieWithParent = true

// Up starts n nodes (node0 ...) as processes of bin (`bin node --config ...`) on 127.0.0.1
// and returns once every node sees all n alive. basePort 0 picks a free random one (and
// retries elsewhere if a port turns out to be taken). bin "" means $IDUNNO_BIN, else this
// executable.
func Up(dir string, n, basePort int, bin string) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("localcluster: need at least one node")
	}
	if bin == "" {
		bin = os.Getenv("IDUNNO_BIN")
	}
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("localcluster: no binary: %w", err)
		}
		bin = exe
	}
	bin, _ = filepath.Abs(bin)
	dir, _ = filepath.Abs(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster.json")); err == nil {
		if c, err := Open(dir); err == nil && len(c.running()) > 0 {
			return nil, fmt.Errorf("localcluster: %s already has running nodes (idunno cluster down --dir %s)", dir, dir)
		}
	}
	auto := basePort == 0
	var lastErr error
	for attempt := 0; attempt < 8; attempt++ {
		if auto {
			basePort = freeBase(n)
		}
		c, err := start(dir, n, basePort, bin)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if !auto || !errors.Is(err, errExited) {
			return nil, err
		}
	}
	return nil, lastErr
}

var errExited = errors.New("node process exited")

func start(dir string, n, basePort int, bin string) (*Cluster, error) {
	secret := make([]byte, 16)
	rand.Read(secret)
	c := &Cluster{dir: dir, procs: map[string]*proc{},
		f: file{Secret: hex.EncodeToString(secret), BasePort: basePort, Bin: bin}}
	var intro []string
	for i := 0; i < n; i++ {
		cfg := sched.NodeConfig{Name: fmt.Sprintf("node%d", i), Host: "127.0.0.1", BasePort: basePort + sched.PortsPerNode*i}
		if i < 3 {
			intro = append(intro, cfg.FDAddr())
		}
		c.f.Nodes = append(c.f.Nodes, Node{Name: cfg.Name, Host: cfg.Host, BasePort: cfg.BasePort,
			FDAddr: cfg.FDAddr(), RPCAddr: cfg.RPCAddr(), HTTPAddr: cfg.HTTPAddr(), DataDir: filepath.Join(dir, cfg.Name)})
	}
	for _, nd := range c.f.Nodes {
		cfg := sched.NodeConfig{Name: nd.Name, Host: nd.Host, BasePort: nd.BasePort, DataDir: nd.DataDir,
			Introducers: intro, Secret: c.f.Secret, Threads: ThreadsPerNode(n, runtime.NumCPU()), MaxLoaders: runtime.NumCPU()}
		if err := os.MkdirAll(nd.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("localcluster: %w", err)
		}
		b, _ := json.MarshalIndent(cfg, "", "  ")
		if err := os.WriteFile(configPath(nd), b, 0o600); err != nil {
			return nil, fmt.Errorf("localcluster: %w", err)
		}
	}
	c.mu.Lock()
	for i := range c.f.Nodes {
		if err := c.spawn(i); err != nil {
			c.mu.Unlock()
			c.Down()
			return nil, err
		}
	}
	err := c.save()
	c.mu.Unlock()
	if err == nil {
		err = c.WaitConverged(ConvergeTimeout)
	}
	if err != nil {
		c.Down()
		return nil, err
	}
	return c, nil
}

func configPath(n Node) string { return filepath.Join(n.DataDir, "config.json") }

// ThreadsPerNode is the kernel threads each of n local nodes gets on a machine of cpus
// cores: the nodes share the cores instead of each assuming all of them. The coordinator
// of a cluster of more than one node runs no tasks, so the n-1 workers divide the cores
// (at least one thread each).
func ThreadsPerNode(n, cpus int) int {
	return max(1, cpus/max(1, n-1))
}

// spawn starts node i's process in a process group of its own (so the terminal's Ctrl-C
// does not reach it; nodes ignore SIGHUP) but in the caller's session: with autogroup
// scheduling, the kernel weighs a session as one group, so a whole local cluster competes
// with the machine's other sessions as one, not as one per node. Caller holds mu.
func (c *Cluster) spawn(i int) error {
	nd := &c.f.Nodes[i]
	out, err := os.OpenFile(filepath.Join(nd.DataDir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(c.f.Bin, "node", "--config", configPath(*nd))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "IDUNNO_CLUSTER="+c.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := StartCmd(cmd); err != nil {
		return fmt.Errorf("localcluster: start %s: %w", nd.Name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	c.procs[nd.Name] = p
	nd.PID = cmd.Process.Pid
	return nil
}

// Open attaches to the cluster recorded in dir.
func Open(dir string) (*Cluster, error) {
	dir, _ = filepath.Abs(dir)
	c := &Cluster{dir: dir, procs: map[string]*proc{}}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) load() error {
	b, err := os.ReadFile(filepath.Join(c.dir, "cluster.json"))
	if err != nil {
		return fmt.Errorf("localcluster: %w (start one with: idunno cluster up --dir %s)", err, c.dir)
	}
	if err := json.Unmarshal(b, &c.f); err != nil {
		return fmt.Errorf("localcluster: parse cluster.json: %w", err)
	}
	return nil
}

func (c *Cluster) save() error {
	b, _ := json.MarshalIndent(c.f, "", "  ")
	tmp := filepath.Join(c.dir, "cluster.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	return os.Rename(tmp, filepath.Join(c.dir, "cluster.json"))
}

// Dir is the cluster directory.
func (c *Cluster) Dir() string { return c.dir }

// Secret is the cluster secret.
func (c *Cluster) Secret() string { return c.f.Secret }

// Nodes returns the recorded nodes.
func (c *Cluster) Nodes() []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Node(nil), c.f.Nodes...)
}

// Node returns one node by name.
func (c *Cluster) Node(name string) (Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, err := c.index(name)
	if err != nil {
		return Node{}, err
	}
	return c.f.Nodes[i], nil
}

// RPCAddr is a node's RPC address ("" if there is no such node).
func (c *Cluster) RPCAddr(name string) string {
	n, _ := c.Node(name)
	return n.RPCAddr
}

func (c *Cluster) index(name string) (int, error) {
	for i, n := range c.f.Nodes {
		if n.Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("localcluster: no node %q", name)
}

// procState is the state letter of a live process running node n ('R', 'S', 'T' for
// stopped...), or 0 if it is gone (or a zombie, or the pid now belongs to something else).
func procState(n Node) byte {
	if n.PID <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(n.PID) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte(configPath(n))) {
		return 0
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(n.PID) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return 0
	}
	return stat[i+2]
}

// Running reports whether a node's process exists (stopped or not).
func (c *Cluster) Running(name string) bool {
	n, err := c.Node(name)
	return err == nil && procState(n) != 0
}

// Live returns the nodes whose processes exist and are not stopped (SIGSTOP).
func (c *Cluster) Live() []Node { return c.running() }

// running returns the nodes whose processes exist and are not stopped.
func (c *Cluster) running() []Node {
	var out []Node
	for _, n := range c.Nodes() {
		if s := procState(n); s != 0 && s != 'T' && s != 't' {
			out = append(out, n)
		}
	}
	return out
}

func (c *Cluster) signal(sig syscall.Signal, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("localcluster: no node named")
	}
	var errs []error
	for _, name := range names {
		n, err := c.Node(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if procState(n) == 0 {
			errs = append(errs, fmt.Errorf("localcluster: %s is not running", name))
			continue
		}
		if err := syscall.Kill(n.PID, sig); err != nil {
			errs = append(errs, fmt.Errorf("localcluster: signal %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Kill sends SIGKILL to the named nodes and waits until their processes are gone.
func (c *Cluster) Kill(names ...string) error {
	err := c.signal(syscall.SIGKILL, names)
	c.waitGone(names, 5*time.Second)
	c.forget(names)
	return err
}

// forget drops the named processes from the reaped set once they are gone, so their exit
// is not mistaken for a crash.
func (c *Cluster) forget(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		if p := c.procs[name]; p != nil {
			select {
			case <-p.done:
				delete(c.procs, name)
			default:
			}
		}
	}
}

// Stop freezes the named nodes with SIGSTOP.
func (c *Cluster) Stop(names ...string) error { return c.signal(syscall.SIGSTOP, names) }

// Cont resumes the named nodes with SIGCONT.
func (c *Cluster) Cont(names ...string) error { return c.signal(syscall.SIGCONT, names) }

// Terminate sends SIGTERM (a clean stop with a voluntary leave) and waits for the processes to exit.
func (c *Cluster) Terminate(names ...string) error {
	err := c.signal(syscall.SIGTERM, names)
	if left := c.waitGone(names, 10*time.Second); len(left) > 0 {
		c.signal(syscall.SIGKILL, left)
		c.waitGone(left, 5*time.Second)
	}
	c.forget(names)
	return err
}

// waitGone waits until the named processes are gone and returns those still there.
func (c *Cluster) waitGone(names []string, limit time.Duration) []string {
	deadline := time.Now().Add(limit)
	for {
		var left []string
		for _, name := range names {
			c.mu.Lock()
			p := c.procs[name]
			c.mu.Unlock()
			if p != nil {
				select {
				case <-p.done:
					continue
				default:
					left = append(left, name)
					continue
				}
			}
			if c.Running(name) {
				left = append(left, name)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts the named nodes again (after a kill or a stop) with the same addresses and
// data directories, and waits until the running nodes agree on the membership. A node still
// running is killed first.
func (c *Cluster) Restart(names ...string) error {
	for _, name := range names {
		if c.Running(name) {
			c.signal(syscall.SIGCONT, []string{name})
			c.Kill(name)
		}
	}
	c.mu.Lock()
	if err := c.load(); err != nil {
		c.mu.Unlock()
		return err
	}
	for _, name := range names {
		i, err := c.index(name)
		if err == nil {
			err = c.spawn(i)
		}
		if err != nil {
			c.mu.Unlock()
			return err
		}
	}
	err := c.save()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.WaitConverged(ConvergeTimeout)
}

// Down stops every node: SIGCONT (for stopped ones), SIGTERM, and SIGKILL for any still
// there after a few seconds.
func (c *Cluster) Down() error {
	var names []string
	for _, n := range c.Nodes() {
		if procState(n) != 0 {
			names = append(names, n.Name)
		}
	}
	c.mu.Lock()
	for name := range c.procs {
		names = append(names, name)
	}
	c.mu.Unlock()
	names = dedup(names)
	for _, name := range names {
		c.signal(syscall.SIGCONT, []string{name})
	}
	for _, name := range names {
		c.signal(syscall.SIGTERM, []string{name})
	}
	if left := c.waitGone(names, 5*time.Second); len(left) > 0 {
		c.signal(syscall.SIGKILL, left)
		if left = c.waitGone(left, 5*time.Second); len(left) > 0 {
			return fmt.Errorf("localcluster: nodes still running: %v", left)
		}
	}
	c.forget(names)
	return nil
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Members asks one node for its membership view.
func (c *Cluster) Members(ctx context.Context, name string) ([]fd.Member, error) {
	cl := rpc.NewClient([]byte(c.f.Secret))
	defer cl.Close()
	var r node.MembersReply
	if err := cl.CallJSON(ctx, c.RPCAddr(name), "fd.members", struct{}{}, &r); err != nil {
		return nil, err
	}
	return r.Members, nil
}

// WaitConverged waits until every running (not stopped) node sees exactly the running nodes
// alive and suspects no one. It fails early if a node this process started exits.
func (c *Cluster) WaitConverged(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	cl := rpc.NewClient([]byte(c.f.Secret))
	defer cl.Close()
	var why string
	for {
		if err := c.checkExited(); err != nil {
			return err
		}
		ok, reason := c.converged(cl)
		if ok {
			return nil
		}
		why = reason
		if time.Now().After(deadline) {
			return fmt.Errorf("localcluster: membership did not converge in %v: %s", limit, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) checkExited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, p := range c.procs {
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(c.dir, name, "stdout.log"))
			delete(c.procs, name)
			return fmt.Errorf("localcluster: %s: %w: %s", name, errExited, lastLines(string(log), 5))
		default:
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

func (c *Cluster) converged(cl *rpc.Client) (bool, string) {
	run := c.running()
	want := map[string]bool{}
	for _, n := range run {
		want[n.FDAddr] = true
	}
	for _, n := range run {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var r node.MembersReply
		err := cl.CallJSON(ctx, n.RPCAddr, "fd.members", struct{}{}, &r)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", n.Name, err)
		}
		alive := 0
		for _, m := range r.Members {
			if m.State == fd.Suspect {
				return false, fmt.Sprintf("%s suspects %s", n.Name, m.Name)
			}
			if m.State == fd.Alive {
				if !want[m.Addr] {
					return false, fmt.Sprintf("%s sees %s alive", n.Name, m.Name)
				}
				alive++
			}
		}
		if alive != len(want) {
			return false, fmt.Sprintf("%s sees %d of %d alive", n.Name, alive, len(want))
		}
	}
	return true, ""
}

// freeBase picks a random base port whose n nodes' ports are all free now, in [20000, the
// start of the kernel's ephemeral port range): a port in that range can be taken as the
// source port of any process's outgoing connection while its node is down, and the node
// then cannot restart on it ("address already in use", seen in CI). Where the ephemeral
// range leaves no room below it, [20000, 50000).
func freeBase(n int) int {
	lo, hi := 20000, 50000
	if e := ephemeralLow(); e-lo >= 100*n*sched.PortsPerNode {
		hi = e
	}
	for {
		base := lo + mrand.IntN((hi-lo-n*sched.PortsPerNode)/10)*10
		if portsFree(base, n) {
			return base
		}
	}
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux; 0 elsewhere).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0
	}
	return lo
}

func portsFree(base, n int) bool {
	for i := 0; i < n; i++ {
		p := base + i*sched.PortsPerNode
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+sched.OffsetFD)))
		if err != nil {
			return false
		}
		u.Close()
		for _, off := range []int{sched.OffsetRPC, sched.OffsetHTTP} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+off)))
			if err != nil {
				return false
			}
			l.Close()
		}
	}
	return true
}
