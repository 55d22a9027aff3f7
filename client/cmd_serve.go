package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"idunno/fd"
	"idunno/kernel"
	"idunno/sched"
	"idunno/sched/httpapi"
)

func init() {
	register("serve", "serve MODEL --sdfs NAME [--nodes N1,N2 | --replicas K] [--max-batch B] [--max-delay D] [--max-queue Q] [--instances I] [--precision fp32|bf16|int8]",
		"load a model from SDFS on some nodes and serve it over HTTP (KServe v2)", runServe)
	register("served", "served [--json]", "list the models each node serves over HTTP", runServed)
	register("unserve", "unserve MODEL [--nodes N1,N2]", "stop serving a model over HTTP (on every node serving it, or on the ones named)", runUnserve)
	nodeSetup = append(nodeSetup, addHTTP)
}

// addHTTP gives a node its HTTP endpoint (KServe v2, /metrics, dashboard) on base port + 2.
func addHTTP(n *sched.Node) error {
	live := func() []fd.Member {
		if n.FD == nil {
			return nil
		}
		return n.FD.Alive()
	}
	svc := httpapi.NewNodeService(httpapi.NodeOptions{
		Config:  httpapi.Config{Node: n.Cfg.Name, Token: n.Cfg.HTTPBearerToken(), Logf: n.Logger("http")},
		Addr:    n.Cfg.HTTPAddr(),
		DataDir: n.Cfg.DataDir,
		Threads: n.Cfg.Threads,
		RPC:     n.RPC,
		Client:  n.Client,
		SelfRPC: n.Cfg.RPCAddr(),
		Peers:   nodePeers{self: n.Cfg.Name, live: live},
		Gauges:  nodeGauges{n: n, live: live},
		Fetch: func(ctx context.Context, name string, w io.Writer) error {
			if n.SDFS == nil {
				return errors.New("this node runs no SDFS store")
			}
			_, err := n.SDFS.Client().Get(ctx, name, w)
			return err
		},
		List: func(ctx context.Context, prefix string) ([]string, error) {
			if n.SDFS == nil {
				return nil, errors.New("this node runs no SDFS store")
			}
			fs, err := n.SDFS.Client().List(ctx, prefix)
			names := make([]string, len(fs))
			for i, f := range fs {
				names[i] = f.Name
			}
			return names, err
		},
	})
	n.Add(svc)
	return nil
}

// nodePeers lists the live members other than this node for the HTTP router.
type nodePeers struct {
	self string
	live func() []fd.Member
}

func (p nodePeers) Peers() []httpapi.Peer {
	var r []httpapi.Peer
	for _, m := range p.live() {
		if m.Name != p.self {
			r = append(r, httpapi.Peer{Name: m.Name, RPCAddr: m.RPCAddr})
		}
	}
	return r
}

// nodeGauges reads the membership size from fd and the bytes stored and replication
// backlog from this node's SDFS store.
type nodeGauges struct {
	n    *sched.Node
	live func() []fd.Member
}

func (g nodeGauges) Gauges() httpapi.ClusterGauges {
	r := httpapi.ClusterGauges{Members: len(g.live()), SDFSBytesStored: -1, ReplicationBacklog: -1}
	if st := g.n.SDFS; st != nil {
		_, r.SDFSBytesStored = st.Usage()
		r.ReplicationBacklog = st.Backlog()
	}
	return r
}

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	t := addTargetFlags(fs)
	sdfsName := fs.String("sdfs", "", "SDFS name of the ONNX model file")
	nodes := fs.String("nodes", "", "comma-separated nodes to serve it on (default: --replicas nodes chosen by the model's name)")
	replicas := fs.Int("replicas", 2, "how many nodes serve it when --nodes is not given")
	maxBatch := fs.Int("max-batch", 1, "dynamic batching: rows per kernel call (1: no batching)")
	maxDelay := fs.Duration("max-delay", 0, "dynamic batching: longest a request waits for others")
	maxQueue := fs.Int("max-queue", httpapi.DefaultMaxQueue, "requests waiting at most; more get 503")
	instances := fs.Int("instances", 1, "kernel calls of this model that may run at once per node")
	precision := precisionFlag(fs)
	model, rest := firstArg(args)
	if err := fs.Parse(rest); err != nil {
		return err
	}
	prec, err := kernel.ParsePrecision(*precision)
	if err != nil {
		return err
	}
	if model == "" || *sdfsName == "" {
		return errors.New("usage: serve MODEL --sdfs NAME [flags]")
	}
	if *maxBatch < 1 || *maxDelay < 0 || *maxQueue < 1 || *instances < 1 || *replicas < 1 {
		return errors.New("--max-batch, --max-queue, --instances and --replicas must be at least 1, --max-delay not negative")
	}
	all, err := t.nodes()
	if err != nil {
		return err
	}
	var alive []fd.Member
	for _, m := range all {
		if m.State == fd.Alive {
			alive = append(alive, m)
		}
	}
	chosen, err := chooseNodes(alive, model, *nodes, *replicas)
	if err != nil {
		return err
	}
	req := httpapi.ServeRequest{SDFSName: *sdfsName, ServedModel: httpapi.ServedModel{Name: model, Instances: *instances,
		Precision: prec.String(), Batch: httpapi.BatchConfig{MaxBatch: *maxBatch, MaxDelay: *maxDelay, MaxQueue: *maxQueue}}}
	var errs []error
	for _, m := range chosen {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := httpapi.Serve(ctx, t.cl, m.RPCAddr, req)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		fmt.Printf("%s serves %s: http://%s/v2/models/%s/infer\n", m.Name, model, m.HTTPAddr, model)
	}
	return errors.Join(errs...)
}

// firstArg splits a leading positional argument from the flags.
func firstArg(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

// chooseNodes picks the named nodes, or k nodes by rendezvous hashing of the model name,
// so that different models spread over the cluster.
func chooseNodes(alive []fd.Member, model, names string, k int) ([]fd.Member, error) {
	if names != "" {
		var r []fd.Member
		for _, n := range strings.Split(names, ",") {
			i := slices.IndexFunc(alive, func(m fd.Member) bool { return m.Name == n })
			if i < 0 {
				return nil, fmt.Errorf("node %q is not a live member of the cluster", n)
			}
			r = append(r, alive[i])
		}
		return r, nil
	}
	score := func(m fd.Member) uint64 {
		h := fnv.New64a()
		h.Write([]byte(model + "\x00" + m.Name))
		return h.Sum64()
	}
	r := slices.Clone(alive)
	slices.SortFunc(r, func(a, b fd.Member) int {
		sa, sb := score(a), score(b)
		if sa > sb {
			return -1
		}
		if sa < sb {
			return 1
		}
		return 0
	})
	if len(r) == 0 {
		return nil, errors.New("no live nodes")
	}
	return r[:min(k, len(r))], nil
}

type servedJSON struct {
	Node string `json:"node"`
	HTTP string `json:"http"`
	httpapi.ServedModel
}

func runServed(args []string) error {
	fs := flag.NewFlagSet("served", flag.ContinueOnError)
	t := addTargetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	all, err := t.nodes()
	if err != nil {
		return err
	}
	out := []servedJSON{}
	for _, m := range all {
		if m.State != fd.Alive {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var ms []httpapi.RemoteModel
		err := t.cl.CallJSON(ctx, m.RPCAddr, httpapi.MethodModels, struct{}{}, &ms)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", m.Name, err)
			continue
		}
		for _, r := range ms {
			out = append(out, servedJSON{Node: m.Name, HTTP: m.HTTPAddr, ServedModel: r.Served})
		}
	}
	if *asJSON {
		e := json.NewEncoder(os.Stdout)
		e.SetIndent("", "  ")
		return e.Encode(out)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tHTTP\tMODEL\tMAX BATCH\tMAX DELAY\tMAX QUEUE\tINSTANCES")
	for _, s := range out {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%v\t%d\t%d\n", s.Node, s.HTTP, s.Name, s.Batch.MaxBatch, s.Batch.MaxDelay, s.Batch.MaxQueue, s.Instances)
	}
	return w.Flush()
}

func runUnserve(args []string) error {
	fs := flag.NewFlagSet("unserve", flag.ContinueOnError)
	t := addTargetFlags(fs)
	nodes := fs.String("nodes", "", "comma-separated nodes (default: every node serving it)")
	model, rest := firstArg(args)
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if model == "" {
		return errors.New("usage: unserve MODEL [--nodes N1,N2]")
	}
	all, err := t.nodes()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*nodes, ",") {
		if n != "" {
			want[n] = true
		}
	}
	var errs []error
	stopped := 0
	for _, m := range all {
		if m.State != fd.Alive || (len(want) > 0 && !want[m.Name]) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var ms []httpapi.RemoteModel
		err := t.cl.CallJSON(ctx, m.RPCAddr, httpapi.MethodModels, struct{}{}, &ms)
		serving := slices.ContainsFunc(ms, func(r httpapi.RemoteModel) bool { return r.Served.Name == model })
		if err == nil && serving {
			err = httpapi.Unserve(ctx, t.cl, m.RPCAddr, model)
		} else if err == nil && len(want) > 0 {
			err = fmt.Errorf("does not serve %s", model)
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		if serving {
			fmt.Printf("%s no longer serves %s\n", m.Name, model)
			stopped++
		}
	}
	if stopped == 0 && len(errs) == 0 {
		return fmt.Errorf("no live node serves %s", model)
	}
	return errors.Join(errs...)
}
