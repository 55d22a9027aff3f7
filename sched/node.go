package sched

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"idunno/fd"
	"idunno/rpc"
	"idunno/sched/logquery"
	"idunno/sdfs"
)

// Component is one subsystem a Node runs (file store, coordinator, worker, HTTP server).
// Start must return promptly (spawn goroutines for long work); Stop undoes it and returns
// when the component has let go of its resources. Components start in the order they were
// added and stop in reverse.
type Component interface {
	Name() string
	Start(ctx context.Context) error
	Stop() error
}

// Logf is a printf-style log function; each subsystem gets one from Node.Logger.
type Logf func(format string, args ...any)

// Node is one IDunno process: its log file, its RPC server and shared client, its failure
// detector, and the components other subsystems add.
type Node struct {
	Cfg    NodeConfig
	Secret []byte
	RPC    *rpc.Server // register methods before Run
	Client *rpc.Client // shared by every subsystem
	FD     *fd.Detector
	SDFS   *sdfs.Store // this node's replica store; SDFS.Client() reads and writes files
	// FDConfig is the detector's config; adjust it between NewNode and Run.
	FDConfig fd.Config

	logMu   sync.Mutex
	logFile *os.File

	components []Component
	ln         net.Listener
}

// NewNode prepares a node: it creates the data directory and the log file and registers the
// fd RPC methods. Nothing listens until Run.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Threads <= 0 {
		cfg.Threads = 1
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	secret, _ := cfg.SecretBytes()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("sched: data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(cfg.DataDir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sched: log file: %w", err)
	}
	n := &Node{Cfg: cfg, Secret: secret, RPC: rpc.NewServer(secret), Client: rpc.NewClient(secret), logFile: f}
	n.RPC.Logf = n.Logger("rpc")
	n.FDConfig = fd.DefaultConfig()
	n.FDConfig.Name, n.FDConfig.Addr = cfg.Name, cfg.FDAddr()
	n.FDConfig.RPCAddr, n.FDConfig.HTTPAddr = cfg.RPCAddr(), cfg.HTTPAddr()
	n.FDConfig.Secret, n.FDConfig.Introducers = secret, cfg.Introducers
	n.FDConfig.Logf = n.Logger("fd")
	n.FDConfig.ThreadNice = cfg.FDThreadNice()
	if v := os.Getenv("IDUNNO_FD_LOSS"); v != "" {
		// Fault injection for tests and benchmarks: drop this fraction of fd packets.
		if p, err := strconv.ParseFloat(v, 64); err == nil {
			n.FDConfig.InjectLoss = p
		}
	}
	n.FDConfig.Incarnation = nextIncarnation(filepath.Join(cfg.DataDir, "fd.incarnation"))
	n.registerFD()
	logquery.Register(n.RPC, f.Name(), cfg.Name)
	if err := n.addStore(); err != nil {
		f.Close()
		return nil, err
	}
	return n, nil
}

// Logger returns the log function of one subsystem. Lines go to DATA_DIR/node.log as
// "2006-01-02T15:04:05.000Z07:00 <name> <subsystem>: message".
func (n *Node) Logger(subsystem string) Logf {
	return func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		line := fmt.Sprintf("%s %s %s: %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), n.Cfg.Name, subsystem, msg)
		n.logMu.Lock()
		n.logFile.WriteString(line)
		n.logMu.Unlock()
	}
}

// Add appends a component; call before Run.
func (n *Node) Add(c Component) { n.components = append(n.components, c) }

// MembersReply is the result of "fd.members".
type MembersReply struct {
	Self    fd.Member   `json:"self"`
	Members []fd.Member `json:"members"`
}

// nextIncarnation returns this run's fd incarnation: the start time in microseconds, but
// always above the one the previous run recorded in path (so a clock stepped backwards
// cannot make a restarted node look older than its previous life), and records it.
func nextIncarnation(path string) uint64 {
	inc := uint64(time.Now().UnixMicro())
	if b, err := os.ReadFile(path); err == nil {
		if prev, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && prev >= inc {
			inc = prev + 1
		}
	}
	os.WriteFile(path, []byte(strconv.FormatUint(inc, 10)+"\n"), 0o644)
	return inc
}

func (n *Node) registerFD() {
	rpc.HandleJSON(n.RPC, "fd.members", func(ctx context.Context, _ struct{}) (MembersReply, error) {
		if n.FD == nil {
			return MembersReply{}, errors.New("sched: failure detector not running")
		}
		return MembersReply{Self: n.FD.Self(), Members: n.FD.Members()}, nil
	})
	rpc.HandleJSON(n.RPC, "fd.leave", func(ctx context.Context, _ struct{}) (struct{}, error) {
		if n.FD == nil {
			return struct{}{}, errors.New("sched: failure detector not running")
		}
		return struct{}{}, n.FD.Leave()
	})
	rpc.HandleJSON(n.RPC, "fd.join", func(ctx context.Context, _ struct{}) (struct{}, error) {
		if n.FD == nil {
			return struct{}{}, errors.New("sched: failure detector not running")
		}
		return struct{}{}, n.FD.Rejoin()
	})
	rpc.HandleJSON(n.RPC, "fd.stats", func(ctx context.Context, _ struct{}) (fd.Stats, error) {
		if n.FD == nil {
			return fd.Stats{}, errors.New("sched: failure detector not running")
		}
		return n.FD.Stats(), nil
	})
}

// Run starts the RPC server, the failure detector and every component, waits for ctx to be
// cancelled, then stops everything (leaving the cluster voluntarily) and returns.
func (n *Node) Run(ctx context.Context) error {
	log := n.Logger("node")
	defer n.logFile.Close()
	ln, err := net.Listen("tcp", n.Cfg.RPCAddr())
	if err != nil {
		return fmt.Errorf("sched: rpc listen: %w", err)
	}
	n.ln = ln
	served := make(chan error, 1)
	go func() { served <- n.RPC.Serve(ln) }()
	defer n.Client.Close()
	defer n.RPC.Close()

	d, err := fd.Start(n.FDConfig)
	if err != nil {
		return err
	}
	n.FD = d
	defer d.Stop()
	log("started: fd %s rpc %s http %s, incarnation %d", n.Cfg.FDAddr(), n.Cfg.RPCAddr(), n.Cfg.HTTPAddr(), d.Self().Incarnation)

	started := 0
	defer func() {
		for i := started - 1; i >= 0; i-- {
			if err := n.components[i].Stop(); err != nil {
				log("stop %s: %v", n.components[i].Name(), err)
			}
		}
	}()
	for _, c := range n.components {
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("sched: start %s: %w", c.Name(), err)
		}
		started++
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("sched: rpc server stopped: %v", err)
	}
	log("stopping: leaving the cluster")
	d.Leave()
	return nil
}
