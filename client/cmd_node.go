package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"idunno/logs"
	"idunno/node"
	"idunno/sched"
)

func runNode(args []string) error {
	fs := newFlags("node")
	cfgPath := fs.String("config", "", "node config JSON file (see sched.NodeConfig)")
	var c sched.NodeConfig
	var intro string
	fs.StringVar(&c.Name, "name", "", "node name")
	fs.StringVar(&c.Host, "host", "127.0.0.1", "address other nodes reach this one at")
	fs.IntVar(&c.BasePort, "base-port", 0, "base port: UDP fd = P, TCP rpc = P+1, TCP http = P+2")
	fs.StringVar(&c.DataDir, "data-dir", "", "data directory (log file, stored data)")
	fs.StringVar(&intro, "introducers", "", "comma-separated fd addresses (host:port) to join through")
	fs.StringVar(&c.Secret, "secret", "", "cluster secret (default $IDUNNO_SECRET)")
	fs.IntVar(&c.Threads, "threads", 1, "kernel threads per model instance")
	fdNice := fs.Int("fd-nice", sched.DefaultFDNice, "nice of the failure detector's threads (below 0 needs CAP_SYS_NICE; 0: as the process)")
	computeNice := fs.Int("compute-nice", sched.DefaultComputeNice, "nice of the worker's task and kernel threads (0: as the process)")
	var opt node.Options
	fs.StringVar(&opt.LogFormat, "log-format", envOr("IDUNNO_LOG_FORMAT", logs.Text), "DATA_DIR/node.log format: text (one line a record, fields as key=value) or json (default $IDUNNO_LOG_FORMAT)")
	level := fs.String("log-level", envOr("IDUNNO_LOG_LEVEL", "info"), "lowest level logged: debug, info, warn or error (default $IDUNNO_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if opt.LogLevel, err = logs.ParseLevel(*level); err != nil {
		return usageError(err.Error())
	}
	if *cfgPath != "" {
		if c, err = sched.LoadConfig(*cfgPath); err != nil {
			return err
		}
	} else if intro != "" {
		c.Introducers = strings.Split(intro, ",")
	}
	// Flags given on the command line win over the config file.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "fd-nice":
			c.FDNice = fdNice
		case "compute-nice":
			c.ComputeNice = computeNice
		}
	})
	n, err := node.New(c, opt)
	if err != nil {
		return err
	}
	// A local cluster's nodes run in the session of the command that started them (one
	// scheduling group for the whole cluster, see localcluster): closing that terminal must
	// not stop them.
	signal.Ignore(syscall.SIGHUP)
	if os.Getenv("IDUNNO_FD_STARVE") == c.Name {
		starve(n.Logf("node"))
	}
	// IDUNNO_CPUPROFILE=FILE profiles the node's CPU until it stops (SIGTERM or SIGINT);
	// "{node}" in FILE becomes the node's name, so a local cluster's nodes write one each.
	// Both nodes of a training benchmark profiled this way died once (glibc reported a
	// corrupted heap) and another time ran to the end: the profiler's SIGPROF also reaches
	// the kernel's OpenMP threads, which Go does not know (see go.dev/issue/15994 for the
	// class of problem), so profile nodes only to read the profile, never in a test.
	if path := os.Getenv("IDUNNO_CPUPROFILE"); path != "" {
		stopProfile, err := profileCPU(strings.ReplaceAll(path, "{node}", c.Name))
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Printf("node %s: fd %s rpc %s http %s\n", c.Name, c.FDAddr(), c.RPCAddr(), c.HTTPAddr())
	return n.Run(ctx)
}

// profileCPU writes a CPU profile to path until the returned stop is called; each SIGUSR1
// ends the file and starts the next, path.1, path.2, ..., so a benchmark can profile its
// phases apart (benchmarks/cluster's manyjobs marks them).
func profileCPU(path string) (stop func(), err error) {
	var f *os.File
	start := func(name string) error {
		g, err := os.Create(name)
		if err != nil {
			return fmt.Errorf("node: cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(g); err != nil {
			g.Close()
			return fmt.Errorf("node: cpu profile: %w", err)
		}
		f = g
		return nil
	}
	if err := start(path); err != nil {
		return nil, err
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for n := 1; ; n++ {
			select {
			case <-quit:
				return
			case <-usr1:
				pprof.StopCPUProfile()
				f.Close()
				if start(fmt.Sprintf("%s.%d", path, n)) != nil {
					f = nil
					return // no more profiles; the node runs on
				}
			}
		}
	}()
	return func() {
		signal.Stop(usr1)
		close(quit)
		<-done
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
		}
	}, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// starve is fault injection for the failure detector's benchmark (IDUNNO_FD_STARVE=NAME):
// the named node keeps twice as many busy loops as it has CPUs running for its whole life,
// so its heartbeats must compete for CPU with compute, as on a loaded worker.
func starve(logf func(string, ...any)) {
	n := 2 * runtime.GOMAXPROCS(0)
	logf("fault injection: %d busy loops (IDUNNO_FD_STARVE)", n)
	for i := 0; i < n; i++ {
		go func() {
			for x := 0; ; x++ {
			}
		}()
	}
}
