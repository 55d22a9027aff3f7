package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/rpc"
	"idunno/sched"
	"idunno/sdfs"
)

// schedCall runs a scheduler method on the cluster (any node forwards to the coordinator),
// retrying briefly while a new coordinator is being elected.
func schedCall(t *target, method string, args, reply any) error {
	cl, err := t.client()
	if err != nil {
		return err // no cluster named: nothing to retry
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// t.addr picks the first node that answers quickly (a frozen one is skipped).
		a, err := t.addr()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			err = cl.CallJSON(ctx, a, method, args, reply)
			cancel()
			if err == nil || (rpc.IsRemote(err) && !sched.Retryable(err)) {
				return err
			}
			if !rpc.IsRemote(err) {
				t.picked = "" // that node went away: pick another
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jobSDFS returns an SDFS client that finds the membership through the cluster's nodes.
func jobSDFS(t *target) (*sdfs.Client, error) {
	cl, err := t.client()
	if err != nil {
		return nil, err
	}
	addrs, _, err := t.candidates()
	if err != nil {
		return nil, err
	}
	if a, err := t.addr(); err == nil {
		addrs = append([]string{a}, addrs...) // a node known to answer first
	}
	return sdfs.NewClient(sdfs.DefaultConfig(), cl, sdfs.GatewayMembers(cl, addrs)), nil
}

func runPhase(args []string, cmd string, phase sched.Phase) error {
	fs := newFlags(cmd)
	t := addTargetFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "start" && pos[0] != "stop") {
		return usageErrorf("usage: idunno %s start|stop", cmd)
	}
	var info sched.ClusterInfo
	if pos[0] == "stop" {
		if err := schedCall(t, "sched.info", struct{}{}, &info); err != nil {
			return err
		}
		if info.Phase != phase {
			return fmt.Errorf("the %s phase is not running (phase: %s)", phase, info.Phase)
		}
		phase = sched.PhaseIdle
	}
	if err := schedCall(t, "sched.phase", sched.PhaseArgs{Phase: phase}, &info); err != nil {
		return err
	}
	fmt.Printf("phase: %s (coordinator %s, epoch %d)\n", info.Phase, info.Coordinator, info.Epoch)
	warnNoStandby(info.NoStandby)
	return nil
}

// warnNoStandby tells the user that a change was confirmed by the coordinator's disk alone:
// no other node was live to hold it as the standby.
func warnNoStandby(none bool) {
	if none {
		fmt.Fprintln(os.Stderr, "warning: the cluster runs without a standby (no other live node): this change is only on the coordinator's disk")
	}
}

func runInference(args []string) error { return runPhase(args, "inference", sched.PhaseInference) }

func runTrain(args []string) error {
	if len(args) > 0 && args[0] == "local" {
		ownMachine()
		return runTrainLocal(args[1:])
	}
	if len(args) > 0 && args[0] == "add" {
		for _, a := range args[1:] {
			if a == "--data" || strings.HasPrefix(a, "--data=") || a == "-data" {
				return runTrainJobAdd(args[1:])
			}
		}
		return runTrainAdd(args[1:])
	}
	if len(args) > 0 && (args[0] == "list" || args[0] == "stats" || args[0] == "wait" || args[0] == "remove") {
		if handled, err := runTrainJobCmd(args[0], args[1:]); handled {
			return err
		}
	}
	if len(args) > 0 && (args[0] == "remove" || args[0] == "list") {
		fs := newFlags("train " + args[0])
		t := addTargetFlags(fs)
		name := fs.String("name", "", "model name (train remove)")
		if _, err := parseInterleaved(fs, args[1:]); err != nil {
			return err
		}
		var info sched.ClusterInfo
		if args[0] == "remove" {
			if *name == "" {
				return usageError("usage: idunno train remove --name N")
			}
			if err := schedCall(t, "sched.model.remove", sched.NameArgs{Name: *name}, &info); err != nil {
				return err
			}
			fmt.Printf("model %s removed (its file stays in SDFS)\n", *name)
			warnNoStandby(info.NoStandby)
			return nil
		}
		if err := schedCall(t, "sched.info", struct{}{}, &info); err != nil {
			return err
		}
		for _, n := range sortedNames(info.Models) {
			fmt.Printf("%s\t%s\n", n, info.Models[n])
		}
		return nil
	}
	return runPhase(args, "train", sched.PhaseTraining)
}

// runTrainAdd is a training job: until real training lands it takes a model (a file or a
// zoo architecture), checks it with the kernel, and stores it in SDFS for inference.
func runTrainAdd(args []string) error {
	fs := newFlags("train add")
	t := addTargetFlags(fs)
	name := fs.String("name", "", "model name jobs refer to")
	model := fs.String("model", "", "FILE.onnx, or zoo:NAME for a zoo architecture")
	shape := fs.String("input-shape", "", "zoo models: input C,H,W")
	classes := fs.Int64("classes", 0, "zoo models: number of classes")
	seed := fs.Uint64("seed", 1, "zoo models: seed of the weights")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	if *name == "" || *model == "" {
		return usageError("usage: idunno train add --name N --model FILE.onnx|zoo:NAME")
	}
	var data []byte
	if arch, ok := strings.CutPrefix(*model, "zoo:"); ok {
		opt := zoo.Options{Classes: *classes, Seed: *seed}
		if *shape != "" {
			for _, f := range strings.Split(*shape, ",") {
				var d int64
				if _, err := fmt.Sscan(strings.TrimSpace(f), &d); err != nil {
					return usageErrorf("--input-shape %q: want C,H,W", *shape)
				}
				opt.InputShape = append(opt.InputShape, d)
			}
		}
		m, err := zoo.Build(arch, opt)
		if err != nil {
			return err
		}
		data = onnx.Encode(m)
	} else {
		b, err := os.ReadFile(*model)
		if err != nil {
			return err
		}
		if _, err := onnx.Decode(b); err != nil {
			return fmt.Errorf("%s: %w", *model, err)
		}
		data = b
	}
	sc, err := jobSDFS(t)
	if err != nil {
		return err
	}
	sdfsName := "idunno/models/" + *name + ".onnx"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := sc.Put(ctx, sdfsName, bytes.NewReader(data)); err != nil {
		return err
	}
	var info sched.ClusterInfo
	if err := schedCall(t, "sched.model.add", sched.ModelArgs{Name: *name, Model: sdfsName}, &info); err != nil {
		return err
	}
	fmt.Printf("model %s stored in SDFS as %s (%d bytes) and checked by the kernel\n", *name, sdfsName, len(data))
	warnNoStandby(info.NoStandby)
	return nil
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func runJob(args []string) error {
	if len(args) == 0 {
		args = []string{"help"}
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "add":
		return runJobAdd(rest)
	case "result", "wait", "remove", "stats", "get":
		return runJobNamed(sub, rest)
	case "list":
		return runJobList(rest)
	}
	out := os.Stderr
	if sub == "help" || wantsHelp(args[:1]) {
		out = os.Stdout
	}
	fmt.Fprint(out, `usage:
  idunno job add --name J --model SDFSNAME|MODEL --data SDFSNAME --batch B [--format idx|npy|images] [--task-size Q] [--weight W] [--precision fp32|bf16|int8] [--wait [--timeout D]]
  idunno job add --name J --model SDFSNAME --input NAME=ARRAY.npy [--input NAME2=ARRAY2.npy ...] --batch B  (models with named, e.g. int64 token, inputs)
                 [--resize HxW] [--grey-to-rgb] [--scale S] [--mean a,b,c] [--std a,b,c]
  idunno job result J LOCAL     fetch the result CSV (query,top1,score) of a finished job
  idunno job wait J [--timeout D]
  idunno job remove J
  idunno job list [--json]
  idunno job stats J [--json]   queries done, rate over 10 s, weight and achieved rate ratio, latency percentiles, workers and shares
`)
	if out == os.Stdout {
		return flag.ErrHelp
	}
	return usageErrorf("unknown job command %q", sub)
}

func runJobAdd(args []string) error {
	fs := newFlags("job add")
	t := addTargetFlags(fs)
	var spec sched.JobSpec
	fs.StringVar(&spec.Name, "name", "", "job name")
	fs.StringVar(&spec.Model, "model", "", "trained model name, or the SDFS name of an ONNX file")
	fs.StringVar(&spec.Labels, "labels", "", "SDFS name of the dataset's labels (IDX or .npy): job stats then reports accuracy")
	fs.StringVar(&spec.Data, "data", "", "SDFS name of the dataset (IDX or .npy, optionally gzip), or a prefix with --format images")
	fs.StringVar(&spec.Format, "format", "", "idx, npy (default: detected) or images (a folder of PNG/JPEG put with putdir)")
	fs.Func("input", "NAME=ARRAY.npy: bind model input NAME to an SDFS .npy array of one row per query\n"+
		"(int64 token ids, masks, float features); repeat for every input, instead of --data", func(v string) error {
		name, file, ok := strings.Cut(v, "=")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("want NAME=ARRAY.npy, got %q", v)
		}
		if spec.Inputs == nil {
			spec.Inputs = map[string]string{}
		}
		if _, dup := spec.Inputs[name]; dup {
			return fmt.Errorf("input %s bound twice", name)
		}
		spec.Inputs[name] = file
		return nil
	})
	fs.IntVar(&spec.Batch, "batch", 0, "batch size (fixed for the job's life)")
	fs.IntVar(&spec.TaskSize, "task-size", 0, "queries per task, a multiple of the batch (default: chosen)")
	fs.Float64Var(&spec.Weight, "weight", 1, "fair-time weight: the job's query rate is W times that of a job of weight 1")
	fs.StringVar(&spec.Precision, "precision", "fp32", "compute precision: fp32, bf16 (workers need AVX512_BF16) or int8 (quantized QDQ models)")
	spec.Pre.Flags(fs)
	wait := fs.Bool("wait", false, "wait until the job is complete (as idunno job wait)")
	timeout := fs.Duration("timeout", 0, "with --wait: give up after this long (0: never; exit status 3)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected arguments %v", pos)
	}
	if err := spec.ValidateRequest(); err != nil {
		return usageError(err.Error()) // refused before asking the cluster
	}
	// The key makes schedCall's retries of this add idempotent (see JobSpec.Request).
	key := make([]byte, 12)
	rand.Read(key)
	spec.Request = hex.EncodeToString(key)
	var r sched.JobAddReply
	if err := schedCall(t, "sched.job.add", spec, &r); err != nil {
		return err
	}
	fmt.Printf("job %s added: %d queries in %d tasks of %d; shares %s\n", spec.Name, r.Queries, r.Tasks, r.TaskSize, r.Split)
	warnNoStandby(r.NoStandby)
	if *wait {
		return waitJob(t, spec.Name, *timeout)
	}
	return nil
}

func runJobNamed(sub string, args []string) error {
	fs := newFlags("job " + sub)
	t := addTargetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 0, "job wait: give up after this long (0: never)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	want := 1
	if sub == "result" {
		want = 2
	}
	if len(pos) != want {
		return usageErrorf("usage: idunno job %s J%s", sub, map[bool]string{true: " LOCAL"}[want == 2])
	}
	name := pos[0]
	switch sub {
	case "remove":
		if err := schedCall(t, "sched.job.remove", sched.NameArgs{Name: name}, nil); err != nil {
			return err
		}
		fmt.Printf("job %s removed\n", name)
		return nil
	case "stats":
		var r sched.JobStatsReport
		if err := schedCall(t, "sched.job.stats", sched.NameArgs{Name: name}, &r); err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(r)
		}
		printStats(os.Stdout, r)
		return nil
	case "get":
		var js sched.JobSummary
		if err := schedCall(t, "sched.job.get", sched.NameArgs{Name: name}, &js); err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(js)
	case "wait":
		return waitJob(t, name, *timeout)
	}
	// result
	var js sched.JobSummary
	if err := schedCall(t, "sched.job.get", sched.NameArgs{Name: name}, &js); err != nil {
		return err
	}
	if !js.Complete {
		return fmt.Errorf("job %s is not complete (%d/%d queries); idunno job wait %s", name, js.Done, js.Queries, name)
	}
	sc, err := jobSDFS(t)
	if err != nil {
		return err
	}
	local := pos[1]
	tmp, err := os.CreateTemp(filepath.Dir(local), ".idunno-result-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := sc.Get(ctx, js.Result, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d queries of job %s\n", local, js.Queries, name)
	return nil
}

// waitJob polls a job until it is complete, showing its progress on stderr; timeout 0
// waits for ever.
func waitJob(t *target, name string, timeout time.Duration) error {
	var stop time.Time
	if timeout > 0 {
		stop = time.Now().Add(timeout)
	}
	p := startProgress("job "+name, "queries", 0)
	defer p.finish()
	for {
		var js sched.JobSummary
		err := schedCall(t, "sched.job.get", sched.NameArgs{Name: name}, &js)
		if err != nil && sched.IsNoJob(err) {
			return err
		}
		if err == nil {
			p.setTotal(int64(js.Queries))
			p.set(int64(js.Done))
		}
		if err == nil && js.Complete {
			p.finish()
			fmt.Printf("job %s complete: %d queries in %.2f s; result %s\n", name, js.Queries, js.Seconds, js.Result)
			return nil
		}
		if !stop.IsZero() && time.Now().After(stop) {
			return timeoutErrorf("job %s not complete after %v (%d/%d queries)", name, timeout, js.Done, js.Queries)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func printStats(w io.Writer, r sched.JobStatsReport) {
	l := r.LatencyMS
	fmt.Fprintf(w, "job %s: %d/%d queries, %.1f queries/s over the last 10 s\n", r.Job, r.Done, r.Total, r.Rate10s)
	ratio := "no other job running"
	if r.RateRatio > 0 {
		ratio = fmt.Sprintf("rate %.2fx the other jobs' per unit of weight", r.RateRatio)
	}
	fmt.Fprintf(w, "weight %g: %s\n", r.Weight, ratio)
	fmt.Fprintf(w, "latency per query (ms): mean %.2f stddev %.2f p50 %.2f p90 %.2f p95 %.2f p99 %.2f\n",
		l.Mean, l.Stddev, l.P50, l.P90, l.P95, l.P99)
	var ws []string
	for _, x := range r.Workers {
		ws = append(ws, fmt.Sprintf("%s(%.2f)", x.Name, x.Share))
	}
	fmt.Fprintf(w, "workers: %s\n", strings.Join(ws, " "))
	if r.Accuracy != nil {
		fmt.Fprintf(w, "accuracy against the labels: %.2f%%\n", 100**r.Accuracy)
	}
}

func runJobList(args []string) error {
	fs := newFlags("job list")
	t := addTargetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	var list []sched.JobSummary
	if err := schedCall(t, "sched.job.list", struct{}{}, &list); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(list)
	}
	printJobList(os.Stdout, list)
	return nil
}

func printJobList(w io.Writer, list []sched.JobSummary) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tMODEL\tDATA\tBATCH\tDONE\tSTATE\tSHARE\tRATE/s\tFIRST QUERY")
	for _, j := range list {
		state := "running"
		if j.Complete {
			state = fmt.Sprintf("complete (%.1fs)", j.Seconds)
		}
		first := "-"
		if j.FirstQueryMS >= 0 {
			first = fmt.Sprintf("%.0f ms", j.FirstQueryMS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d/%d\t%s\t%.3f\t%.1f\t%s\n", j.Name, j.Model, j.Data, j.Batch,
			j.Done, j.Queries, state, j.Share, j.Rate10s, first)
	}
	tw.Flush()
}

func runTop(args []string) error {
	fs := newFlags("top")
	t := addTargetFlags(fs)
	once := fs.Bool("once", false, "print one screen and exit")
	every := fs.Duration("interval", time.Second, "refresh interval")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	// Into a pipe or a file: one plain snapshot, no escape codes.
	*once = *once || !isTerminal(os.Stdout)
	for {
		var buf bytes.Buffer
		var info sched.ClusterInfo
		var list []sched.JobSummary
		err := schedCall(t, "sched.info", struct{}{}, &info)
		if err == nil {
			err = schedCall(t, "sched.job.list", struct{}{}, &list)
		}
		if !*once {
			buf.WriteString("\x1b[H\x1b[2J")
		}
		fmt.Fprintf(&buf, "IDunno  %s  ", time.Now().Format("15:04:05"))
		if err != nil {
			fmt.Fprintf(&buf, "no coordinator: %v\n", err)
		} else {
			fmt.Fprintf(&buf, "phase %s  coordinator %s (epoch %d)  standby %s\n\n", info.Phase, info.Coordinator, info.Epoch, info.Standby)
			printJobList(&buf, list)
			var trains []sched.TrainSummary
			if schedCall(t, "sched.train.list", struct{}{}, &trains) == nil && len(trains) > 0 {
				buf.WriteString("\ntraining jobs:\n")
				for _, tj := range trains {
					var tb strings.Builder
					printTrainLineTo(&tb, tj)
					buf.WriteString(tb.String())
					if n := len(tj.Losses); n > 1 {
						fmt.Fprintf(&buf, "  loss %s\n", sparkline(tj.Losses, 60))
					}
				}
			}
			for _, j := range list {
				if j.Complete {
					continue
				}
				var r sched.JobStatsReport
				if schedCall(t, "sched.job.stats", sched.NameArgs{Name: j.Name}, &r) == nil {
					buf.WriteString("\n")
					printStats(&buf, r)
				}
			}
		}
		os.Stdout.Write(buf.Bytes())
		if *once {
			return err
		}
		time.Sleep(*every)
	}
}
