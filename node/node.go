// Package node wires one IDunno process together: its log, RPC server and client, failure
// detector, SDFS store, scheduler and HTTP server, built explicitly and in order.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"idunno/fd"
	"idunno/logs"
	"idunno/modelcache"
	"idunno/netfault"
	"idunno/rpc"
	"idunno/sched"
	"idunno/sched/logquery"
	"idunno/sdfs"
	"idunno/serving"
)

// Options are how a node logs: LogFormat logs.Text (the default) or logs.JSON, and the
// lowest level written (the zero value is Info).
type Options struct {
	LogFormat string
	LogLevel  slog.Level
}

// Node is one IDunno process. New builds every part; Run starts them in the order below
// and stops them in reverse.
type Node struct {
	cfg     sched.NodeConfig
	logFile *os.File
	log     *slog.Logger

	rpc    *rpc.Server // every subsystem registers its methods here before Run
	client *rpc.Client // shared by every subsystem
	fdCfg  fd.Config
	// fd is the running detector, set by Run once it starts. The store, scheduler, HTTP
	// server and fd.* methods read the membership through it (none before it is set).
	fd atomic.Pointer[fd.Detector]

	store  *sdfs.Store
	sched  *sched.Scheduler
	http   *serving.NodeService
	models *modelcache.Cache // loaded models, shared by the jobs' executor and HTTP serving
}

// New builds a node: data directory and log, RPC, the detector's config, the SDFS store,
// the scheduler and the HTTP service, each registering its RPC methods. Nothing listens
// until Run.
func New(cfg sched.NodeConfig, opt Options) (*Node, error) {
	if cfg.Threads <= 0 {
		cfg.Threads = 1
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg}
	if err := n.openLog(opt); err != nil {
		return nil, err
	}
	secret, _ := cfg.SecretBytes()
	n.rpc, n.client = rpc.NewServer(secret), rpc.NewClient(secret)
	n.rpc.Logf = n.Logf("rpc")
	n.fdCfg = n.detectorConfig(secret)
	n.registerFD()
	logquery.Register(n.rpc, n.logFile.Name(), cfg.Name)
	if err := n.buildParts(); err != nil {
		n.logFile.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) buildParts() error {
	var err error
	n.models = modelcache.New(modelcache.DefaultSize)
	if n.store, err = n.newStore(); err != nil {
		return err
	}
	if n.sched, err = n.newScheduler(); err != nil {
		return err
	}
	n.http = n.newHTTP()
	return nil
}

// openLog opens DATA_DIR/node.log, where every subsystem's records go (see package logs).
func (n *Node) openLog(opt Options) error {
	if err := os.MkdirAll(n.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("node: data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(n.cfg.DataDir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node: log file: %w", err)
	}
	l, err := logs.New(f, n.cfg.Name, opt.LogFormat, opt.LogLevel)
	if err != nil {
		f.Close()
		return err
	}
	n.logFile, n.log = f, l
	return nil
}

// Logf returns the printf-style log function of one subsystem (see logs.Printf).
func (n *Node) Logf(subsystem string) func(format string, args ...any) {
	return logs.Printf(n.log, subsystem)
}

// detectorConfig is the failure detector's config for this node. IDUNNO_FD_LOSS=P drops a
// fraction P of its packets (fault injection for tests and benchmarks).
func (n *Node) detectorConfig(secret []byte) fd.Config {
	c := fd.DefaultConfig()
	c.Name, c.Addr = n.cfg.Name, n.cfg.FDAddr()
	c.RPCAddr, c.HTTPAddr = n.cfg.RPCAddr(), n.cfg.HTTPAddr()
	c.Secret, c.Introducers = secret, n.cfg.Introducers
	c.Logf = n.Logf("fd")
	c.ThreadNice = n.cfg.FDThreadNice()
	if v := os.Getenv("IDUNNO_FD_LOSS"); v != "" {
		if p, err := strconv.ParseFloat(v, 64); err == nil {
			c.InjectLoss = p
		}
	}
	c.Incarnation = nextIncarnation(filepath.Join(n.cfg.DataDir, "fd.incarnation"))
	return c
}

// newStore opens the node's SDFS replica store and registers its RPC methods.
func (n *Node) newStore() (*sdfs.Store, error) {
	st, err := sdfs.New(sdfs.DefaultConfig(), n.cfg.DataDir, sdfs.Peer{Name: n.cfg.Name, Addr: n.cfg.RPCAddr()},
		storeMembership{n}, n.client)
	if err != nil {
		return nil, err
	}
	st.Logf = n.Logf("sdfs")
	st.Register(n.rpc)
	return st, nil
}

// newScheduler builds the scheduler (coordinator, standby and worker): it reads models and
// data from SDFS, runs them with the kernel on Threads threads, and keeps its journal in
// DATA_DIR/sched.
func (n *Node) newScheduler() (*sched.Scheduler, error) {
	blobs := sdfsBlobs{sdfs.NewClient(sdfs.DefaultConfig(), n.client, n.sdfsPeers)}
	logf := n.Logf("sched")
	cfg := sched.DefaultSchedConfig()
	cfg.MaxLoaders = n.cfg.MaxLoaders
	return sched.NewScheduler(sched.Deps{
		Name: n.cfg.Name, RPCAddr: n.cfg.RPCAddr(), DataDir: n.cfg.DataDir,
		Membership: schedMembership{n}, Blobs: blobs,
		Executor: &sched.KernelExecutor{Blobs: blobs, Threads: n.cfg.Threads, Nice: n.cfg.ComputeThreadNice(), Logf: logf, Models: n.models},
		Client:   n.client, Logf: logf,
	}, cfg, n.rpc)
}

// newHTTP builds the HTTP endpoint (KServe v2, /metrics, dashboard) on base port + 2.
func (n *Node) newHTTP() *serving.NodeService {
	files := n.store.Client()
	return serving.NewNodeService(serving.NodeOptions{
		Config:  serving.Config{Node: n.cfg.Name, Token: n.cfg.HTTPBearerToken(), Logf: n.Logf("http")},
		Addr:    n.cfg.HTTPAddr(),
		DataDir: n.cfg.DataDir,
		Threads: n.cfg.Threads,
		RPC:     n.rpc,
		Client:  n.client,
		SelfRPC: n.cfg.RPCAddr(),
		Models:  n.models,
		Peers:   httpPeers{n},
		Gauges:  httpGauges{n},
		Tasks: func() serving.TaskCounts {
			t := n.sched.WorkerTasks()
			return serving.TaskCounts{Running: t.Running, Queued: t.Queued, Done: t.Done}
		},
		Fetch: func(ctx context.Context, name string, w io.Writer) error {
			_, err := files.Get(ctx, name, w)
			return err
		},
		List: func(ctx context.Context, prefix string) ([]string, error) {
			fs, err := files.List(ctx, prefix)
			names := make([]string, len(fs))
			for i, f := range fs {
				names[i] = f.Name
			}
			return names, err
		},
	})
}

// Run serves RPC, starts the failure detector, the store's repair loop, the scheduler and
// the HTTP server, waits for ctx to end, then stops them in reverse order (leaving the
// cluster voluntarily) and returns.
func (n *Node) Run(ctx context.Context) error {
	log := n.Logf("node")
	defer n.logFile.Close()
	defer netfault.ArmFromEnv(n.Logf("netfault"))() // test-only: IDUNNO_TEST_NETCUT=1
	ln, err := net.Listen("tcp", n.cfg.RPCAddr())
	if err != nil {
		return fmt.Errorf("node: rpc listen: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- n.rpc.Serve(ln) }()
	defer n.client.Close()
	defer n.rpc.Close()

	d, err := fd.Start(n.fdCfg)
	if err != nil {
		return err
	}
	n.fd.Store(d)
	defer d.Stop()
	log("started: fd %s rpc %s http %s, incarnation %d", n.cfg.FDAddr(), n.cfg.RPCAddr(), n.cfg.HTTPAddr(), d.Self().Incarnation)

	storeCtx, stopStore := context.WithCancel(ctx)
	storeDone := make(chan struct{})
	go func() {
		defer close(storeDone)
		n.store.Run(storeCtx)
	}()
	defer func() { stopStore(); <-storeDone }()

	n.sched.Start()
	defer n.sched.Stop()

	if err := n.http.Start(ctx); err != nil {
		return fmt.Errorf("node: start http: %w", err)
	}
	defer func() {
		if err := n.http.Stop(); err != nil {
			log("stop http: %v", err)
		}
	}()

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("node: rpc server stopped: %v", err)
	}
	log("stopping: leaving the cluster")
	d.Leave()
	return nil
}

// MembersReply is the result of "fd.members".
type MembersReply struct {
	Self    fd.Member   `json:"self"`
	Members []fd.Member `json:"members"`
}

var errNoDetector = errors.New("node: failure detector not running")

// registerFD serves the detector's view and controls over RPC: fd.members, fd.leave,
// fd.join and fd.stats.
func (n *Node) registerFD() {
	rpc.HandleJSON(n.rpc, "fd.members", func(ctx context.Context, _ struct{}) (MembersReply, error) {
		d := n.fd.Load()
		if d == nil {
			return MembersReply{}, errNoDetector
		}
		return MembersReply{Self: d.Self(), Members: d.Members()}, nil
	})
	rpc.HandleJSON(n.rpc, "fd.leave", func(ctx context.Context, _ struct{}) (struct{}, error) {
		d := n.fd.Load()
		if d == nil {
			return struct{}{}, errNoDetector
		}
		return struct{}{}, d.Leave()
	})
	rpc.HandleJSON(n.rpc, "fd.join", func(ctx context.Context, _ struct{}) (struct{}, error) {
		d := n.fd.Load()
		if d == nil {
			return struct{}{}, errNoDetector
		}
		return struct{}{}, d.Rejoin()
	})
	rpc.HandleJSON(n.rpc, "fd.stats", func(ctx context.Context, _ struct{}) (fd.Stats, error) {
		d := n.fd.Load()
		if d == nil {
			return fd.Stats{}, errNoDetector
		}
		return d.Stats(), nil
	})
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
