package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"idunno/fd"
	"idunno/kernel"
	"idunno/serving"
)

func runServe(args []string) error {
	fs := newFlags("serve")
	t := addTargetFlags(fs)
	sdfsName := fs.String("sdfs", "", "SDFS name of the ONNX model file")
	nodes := fs.String("nodes", "", "comma-separated nodes to serve it on (default: --replicas nodes chosen by the model's name)")
	replicas := fs.Int("replicas", 2, "how many nodes serve it when --nodes is not given")
	maxBatch := fs.Int("max-batch", 1, "dynamic batching: rows per kernel call (1: no batching)")
	maxDelay := fs.Duration("max-delay", 0, "dynamic batching: longest a request waits for others")
	maxQueue := fs.Int("max-queue", serving.DefaultMaxQueue, "requests waiting at most; more get 503")
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
		return usageError("usage: serve MODEL --sdfs NAME [flags]")
	}
	if *maxBatch < 1 || *maxDelay < 0 || *maxQueue < 1 || *instances < 1 || *replicas < 1 {
		return usageError("--max-batch, --max-queue, --instances and --replicas must be at least 1, --max-delay not negative")
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
	req := serving.ServeRequest{SDFSName: *sdfsName, ServedModel: serving.ServedModel{Name: model, Instances: *instances,
		Precision: prec.String(), Batch: serving.BatchConfig{MaxBatch: *maxBatch, MaxDelay: *maxDelay, MaxQueue: *maxQueue}}}
	var errs []error
	for _, m := range chosen {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := serving.Serve(ctx, t.cl, m.RPCAddr, req)
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
	serving.ServedModel
}

func runServed(args []string) error {
	fs := newFlags("served")
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
		var ms []serving.RemoteModel
		err := t.cl.CallJSON(ctx, m.RPCAddr, serving.MethodModels, struct{}{}, &ms)
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
	fs := newFlags("unserve")
	t := addTargetFlags(fs)
	nodes := fs.String("nodes", "", "comma-separated nodes (default: every node serving it)")
	model, rest := firstArg(args)
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if model == "" {
		return usageError("usage: unserve MODEL [--nodes N1,N2]")
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
		var ms []serving.RemoteModel
		err := t.cl.CallJSON(ctx, m.RPCAddr, serving.MethodModels, struct{}{}, &ms)
		served := slices.ContainsFunc(ms, func(r serving.RemoteModel) bool { return r.Served.Name == model })
		if err == nil && served {
			err = serving.Unserve(ctx, t.cl, m.RPCAddr, model)
		} else if err == nil && len(want) > 0 {
			err = fmt.Errorf("does not serve %s", model)
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		if served {
			fmt.Printf("%s no longer serves %s\n", m.Name, model)
			stopped++
		}
	}
	if stopped == 0 && len(errs) == 0 {
		return fmt.Errorf("no live node serves %s", model)
	}
	return errors.Join(errs...)
}
