package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/sched/dataset"
	"idunno/sched/train"
)

// localImageNames lists a folder's files (relative, slash-separated, sorted).
func localImageNames(dir string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

// openLocalDataset opens an IDX or .npy file (gzip or plain), or a folder of PNG/JPEG images.
func openLocalDataset(path string) (dataset.Dataset, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		names, err := localImageNames(path)
		if err != nil {
			return nil, err
		}
		return dataset.OpenImages(names, func(n string) ([]byte, error) { return os.ReadFile(filepath.Join(path, n)) })
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ds, err := dataset.Open(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ds, nil
}

func int64Labels(l []int32) []int64 {
	out := make([]int64, len(l))
	for i, v := range l {
		out[i] = int64(v)
	}
	return out
}

// loadLocalLabels reads a label file (IDX labels or a .npy integer array, gzip or plain).
func loadLocalLabels(path string) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l, err := dataset.ReadLabels(path, f)
	if err != nil {
		return nil, err
	}
	return int64Labels(l), nil
}

// loadLabelled opens images and their labels: a label file, or, for a folder of images
// with one sub-folder per class and no label file, the sub-folders (sorted names are
// classes 0, 1, ...).
func loadLabelled(images, labels string, prep dataset.Preprocess) (train.Data, error) {
	ds, err := openLocalDataset(images)
	if err != nil {
		return train.Data{}, err
	}
	var l []int64
	if labels == "" {
		names, err := localImageNames(images)
		if err != nil {
			return train.Data{}, fmt.Errorf("%s: no --labels given and not a folder of class folders: %w", images, err)
		}
		_, li, classes, err := dataset.ImageFolderLabels(names)
		if err != nil {
			return train.Data{}, fmt.Errorf("%s: no --labels given: %w", images, err)
		}
		fmt.Fprintf(os.Stderr, "%s: %d classes from its folders (%s ...)\n", images, len(classes), classes[0])
		l = int64Labels(li)
	} else if l, err = loadLocalLabels(labels); err != nil {
		return train.Data{}, err
	}
	if len(l) != ds.Len() {
		return train.Data{}, fmt.Errorf("%s has %d labels for the %d images of %s", labels, len(l), ds.Len(), images)
	}
	return train.Data{Images: ds, Labels: l, Prep: prep}, nil
}

// loadTrainModel reads FILE.onnx or builds zoo:NAME.
func loadTrainModel(spec, shape string, classes int64, seed uint64, init string) (*onnx.Model, error) {
	arch, ok := strings.CutPrefix(spec, "zoo:")
	if !ok {
		return onnx.ReadFile(spec)
	}
	opt := zoo.Options{Classes: classes, Seed: seed}
	if shape != "" {
		for _, f := range strings.Split(shape, ",") {
			var d int64
			if _, err := fmt.Sscan(strings.TrimSpace(f), &d); err != nil {
				return nil, fmt.Errorf("--input-shape %q: want C,H,W", shape)
			}
			opt.InputShape = append(opt.InputShape, d)
		}
	}
	if init != "default" {
		opt.Init = init
	}
	return zoo.Build(arch, opt)
}

// trainFlags are the flags `train local` and `train add` share: the initial model, the
// data's labels and evaluation set, the plan, the optimizer and its schedule, preprocessing.
type trainFlags struct {
	model, shape, zinit, data, labels, evalData, evalLabels *string
	classes                                                 *int64
	epochs, batch, shards, warmup                           *int
	lr, momentum, wd                                        *float64
	nesterov                                                *bool
	optim, schedule                                         *string
	seed                                                    *uint64
	prep                                                    dataset.Preprocess
}

// addTrainFlags registers them; where says where --data and friends are ("" on this
// machine, else e.g. "SDFS name of ").
func addTrainFlags(fs *flag.FlagSet, where string) *trainFlags {
	f := &trainFlags{}
	f.model = fs.String("model", "", "initial model: FILE.onnx, an SDFS name (train add), or zoo:NAME")
	f.shape = fs.String("input-shape", "", "zoo models: input C,H,W")
	f.classes = fs.Int64("classes", 10, "zoo models: number of classes")
	f.zinit = fs.String("init", "torch", "zoo models: weight initialisation: torch (PyTorch's) or default (the zoo's inference weights)")
	f.data = fs.String("data", "", where+"training images (IDX, .npy, or a folder of images)")
	f.labels = fs.String("labels", "", where+"training labels (IDX labels or .npy integers; omit for a local folder of class folders)")
	f.evalData = fs.String("eval-data", "", where+"evaluation images (optional)")
	f.evalLabels = fs.String("eval-labels", "", where+"evaluation labels")
	f.epochs = fs.Int("epochs", 1, "epochs")
	f.batch = fs.Int("batch", 64, "global batch")
	f.shards = fs.Int("shards", 1, "shards per step (the cluster's unit of parallel work; the result does not depend on workers)")
	f.lr = fs.Float64("lr", 0.01, "learning rate")
	f.momentum = fs.Float64("momentum", 0.9, "SGD momentum")
	f.nesterov = fs.Bool("nesterov", false, "Nesterov momentum")
	f.wd = fs.Float64("weight-decay", 0, "weight decay (L2 for sgd/adam, decoupled for adamw)")
	f.optim = fs.String("optimizer", "sgd", "sgd, adam or adamw")
	f.schedule = fs.String("schedule", "constant", "constant, step:EPOCHS:GAMMA or cosine[:MIN_LR]")
	f.warmup = fs.Int("warmup", 0, "steps of linear learning-rate warm-up")
	f.seed = fs.Uint64("seed", 1, "seed of the sample order, dropout masks and zoo weights")
	f.prep.Flags(fs)
	return f
}

// optimizer is the optimizer and schedule the flags give (momentum is SGD's only).
func (f *trainFlags) optimizer() (kernel.Optimizer, train.Schedule, error) {
	sc, err := train.ParseSchedule(*f.schedule, *f.warmup)
	opt := kernel.Optimizer{Kind: *f.optim, Momentum: *f.momentum, Nesterov: *f.nesterov, WeightDecay: *f.wd}
	if opt.Kind != "sgd" {
		opt.Momentum = 0
	}
	return opt, sc, err
}

// loadModel reads the initial model file or builds the zoo model.
func (f *trainFlags) loadModel() (*onnx.Model, error) {
	return loadTrainModel(*f.model, *f.shape, *f.classes, *f.seed, *f.zinit)
}

// runTrainLocal is `idunno train local`: training on this machine.
func runTrainLocal(args []string) error {
	fs := newFlags("train local")
	tf := addTrainFlags(fs, "")
	threads := fs.Int("threads", 0, "kernel threads (0: one per CPU)")
	out := fs.String("out", "", "trained model file (ONNX, BatchNorm folded)")
	ckpt := fs.String("checkpoint", "", "checkpoint file (default OUT.ckpt)")
	ckEvery := fs.Int("checkpoint-every", 0, "also checkpoint every N steps")
	resume := fs.Bool("resume", false, "continue from the checkpoint if it exists")
	asJSON := fs.Bool("json", false, "print one JSON line per epoch")
	evalPrec := fs.String("precision", "fp32", "kernel precision of the per-epoch evaluation: fp32, bf16 or int8")
	if pos, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *tf.model == "" || *tf.data == "" || *out == "" {
		return usageError("usage: idunno train local --model INIT.onnx|zoo:NAME --data IMAGES --labels LABELS --epochs E --batch B --out TRAINED.onnx [--lr --momentum --weight-decay --optimizer sgd|adam|adamw --schedule ... --seed S --threads T] [--eval-data IMAGES --eval-labels LABELS [--precision fp32|bf16|int8]] [preprocessing flags]")
	}
	opt, schedule, err := tf.optimizer()
	if err != nil {
		return err
	}
	ep, err := kernel.ParsePrecision(*evalPrec)
	if err != nil {
		return err
	}
	m, err := tf.loadModel()
	if err != nil {
		return err
	}
	td, err := loadLabelled(*tf.data, *tf.labels, tf.prep)
	if err != nil {
		return err
	}
	var ev *train.Data
	if *tf.evalData != "" {
		e, err := loadLabelled(*tf.evalData, *tf.evalLabels, tf.prep)
		if err != nil {
			return err
		}
		ev = &e
	}
	if *threads <= 0 {
		*threads = runtime.NumCPU()
	}
	if *ckpt == "" {
		*ckpt = *out + ".ckpt"
	}
	cfg := train.Config{
		Plan:      train.Plan{Batch: *tf.batch, Shards: *tf.shards, Epochs: *tf.epochs, Seed: *tf.seed, Samples: td.Images.Len()},
		LR:        *tf.lr,
		Optimizer: opt,
		Schedule:  schedule, Threads: *threads, Checkpoint: *ckpt, CheckpointEvery: *ckEvery, Resume: *resume,
		EvalPrecision: ep,
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	tty := isTerminal(os.Stdout) && !*asJSON
	var lastDraw time.Time
	hooks := train.Hooks{
		Step: func(p train.Progress) {
			if !tty || (time.Since(lastDraw) < 100*time.Millisecond && p.Step != p.TotalSteps) {
				return
			}
			lastDraw = time.Now()
			const width = 30
			done := width * p.Step / p.TotalSteps
			fmt.Printf("\r[%s%s] step %d/%d  epoch %d  loss %.4f  %.0f samples/s ", strings.Repeat("=", done),
				strings.Repeat(" ", width-done), p.Step, p.TotalSteps, p.Epoch+1, p.Loss, p.SamplesPerSec)
		},
		Epoch: func(r train.EpochReport) {
			if *asJSON {
				b, _ := json.Marshal(r)
				fmt.Println(string(b))
				return
			}
			if tty {
				fmt.Print("\r\033[K")
			}
			ev := ""
			if r.EvalAccuracy != nil {
				ev = fmt.Sprintf("  eval acc %.2f%%", 100**r.EvalAccuracy)
			}
			fmt.Printf("epoch %d/%d  loss %.4f  train acc %.2f%%%s  %.0f samples/s  %.1f s\n", r.Epoch, *tf.epochs, r.Loss,
				100*r.TrainAccuracy, ev, r.SamplesPerSec, r.Seconds)
		},
	}
	trained, _, err := train.Local(ctx, m, cfg, td, ev, hooks)
	if err != nil {
		if tty {
			fmt.Println()
		}
		var d *train.DivergedError
		if errors.As(err, &d) {
			return fmt.Errorf("%w; the last good checkpoint is %s", err, *ckpt)
		}
		return err
	}
	if err := train.WriteFileAtomic(*out, func(w io.Writer) error { _, err := w.Write(onnx.Encode(trained)); return err }); err != nil {
		return err
	}
	if !*asJSON {
		fmt.Printf("trained model written to %s\n", *out)
	}
	return nil
}

func runEval(args []string) error {
	ownMachine()
	fs := newFlags("eval")
	model := fs.String("model", "", "ONNX model")
	data := fs.String("data", "", "images (IDX, .npy, or a folder of images)")
	labels := fs.String("labels", "", "labels (IDX labels or .npy integers; omit for a folder of class folders)")
	batch := fs.Int("batch", 256, "batch size")
	threads := fs.Int("threads", 0, "kernel threads (0: one per CPU)")
	asJSON := fs.Bool("json", false, "print JSON")
	precision := precisionFlag(fs)
	agree := fs.Bool("agreement", false, "also run at fp32 and report how often the top-1 answers agree")
	var prep dataset.Preprocess
	prep.Flags(fs)
	if pos, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *model == "" || *data == "" || *batch < 1 {
		return usageError("usage: idunno eval --model M.onnx --data IMAGES --labels LABELS [preprocessing flags] [--batch B] [--threads T] [--precision fp32|bf16|int8] [--agreement] [--json]")
	}
	prec, err := kernel.ParsePrecision(*precision)
	if err != nil {
		return err
	}
	m, err := onnx.ReadFile(*model)
	if err != nil {
		return err
	}
	d, err := loadLabelled(*data, *labels, prep)
	if err != nil {
		return err
	}
	if *threads <= 0 {
		*threads = runtime.NumCPU()
	}
	pred, err := train.Predict(m, d, *batch, *threads, prec)
	if err != nil {
		return err
	}
	if len(pred) != len(d.Labels) {
		return fmt.Errorf("%d labels for %d images", len(d.Labels), len(pred))
	}
	c, n := 0, len(pred)
	for i, p := range pred {
		if p == d.Labels[i] {
			c++
		}
	}
	res := map[string]any{"correct": c, "samples": n, "accuracy": float64(c) / float64(n), "precision": prec.String()}
	same := -1
	if *agree {
		ref, err := train.Predict(m, d, *batch, *threads, kernel.FP32)
		if err != nil {
			return err
		}
		same = 0
		for i := range pred {
			if pred[i] == ref[i] {
				same++
			}
		}
		res["agreement_with_fp32"] = float64(same) / float64(n)
	}
	if *asJSON {
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
		return nil
	}
	fmt.Printf("top-1 accuracy %.2f%% (%d of %d) at %s\n", 100*float64(c)/float64(n), c, n, prec)
	if same >= 0 {
		fmt.Printf("top-1 agreement with fp32 %.2f%% (%d of %d)\n", 100*float64(same)/float64(n), same, n)
	}
	return nil
}

// trainBenchResult is `idunno bench train`'s report.
type trainBenchResult struct {
	Framework      string  `json:"framework"`
	Model          string  `json:"model"`
	Batch          int     `json:"batch"`
	Threads        int     `json:"threads"`
	Optimizer      string  `json:"optimizer"`
	Steps          int     `json:"steps"`
	Seconds        float64 `json:"seconds"`
	SamplesPerSec  float64 `json:"samples_per_sec"`
	StepMsMedian   float64 `json:"step_ms_median"`
	GFLOPPerSample float64 `json:"gflop_per_sample"` // forward + backward: 3x the forward's
	PeakGFLOPS     float64 `json:"peak_gflops"`
	FractionOfPeak float64 `json:"fraction_of_peak"`
	FractionP50    float64 `json:"fraction_of_peak_p50"`
}

// runBenchTrain times training steps (forward, loss, backward, optimizer) on seeded random
// data and labels.
func runBenchTrain(args []string) error {
	fs := newFlags("bench train")
	model := fs.String("model", "", "ONNX model file, or zoo:NAME")
	shape := fs.String("input-shape", "", "zoo models: input C,H,W")
	classes := fs.Int64("classes", 10, "zoo models: classes")
	batch := fs.Int("batch", 64, "batch size")
	threads := fs.Int("threads", 2, "kernel threads")
	seconds := fs.Float64("seconds", 10, "how long to run")
	optim := fs.String("optimizer", "sgd", "sgd (momentum 0.9), adam or adamw")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *batch < 1 || *threads < 1 || *seconds <= 0 || fs.NArg() > 0 {
		return usageError("usage: idunno bench train --model M.onnx|zoo:NAME --batch B --threads T --seconds S [--optimizer sgd|adam|adamw] [--json]")
	}
	m, err := loadTrainModel(*model, *shape, *classes, 1, "torch")
	if err != nil {
		return err
	}
	tr, err := kernel.NewTrainer(m, *batch, kernel.Options{Threads: *threads})
	if err != nil {
		return err
	}
	defer tr.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, tr.Input().Dims[0]*volumeOf(tr.Input().Dims[1:]))
	for i := range x {
		x[i] = rng.Float32()
	}
	y := make([]int64, *batch)
	for i := range y {
		y[i] = int64(rng.IntN(tr.Classes()))
	}
	opt := kernel.Optimizer{Kind: *optim}
	if *optim == "sgd" {
		opt.Momentum = 0.9
	}
	step := int64(0)
	one := func() error {
		step++
		if _, _, err := tr.Run(x, y, 1/float32(*batch), uint64(step)); err != nil {
			return err
		}
		if err := tr.ApplyBatchStats(nil); err != nil {
			return err
		}
		return tr.Optimize(opt, 0.001, step)
	}
	peak := kernel.PeakGFLOPS(*threads)
	for range 3 {
		if err := one(); err != nil {
			return err
		}
	}
	var lat []float64
	start := time.Now()
	dur := time.Duration(*seconds * float64(time.Second))
	for time.Since(start) < dur || len(lat) < 3 {
		t0 := time.Now()
		if err := one(); err != nil {
			return err
		}
		lat = append(lat, float64(time.Since(t0))/1e6)
	}
	total := time.Since(start).Seconds()
	sort.Float64s(lat)
	r := trainBenchResult{Framework: "idunno", Model: filepath.Base(*model), Batch: *batch, Threads: *threads, Optimizer: *optim,
		Steps: len(lat), Seconds: total, SamplesPerSec: float64(len(lat)**batch) / total, StepMsMedian: lat[len(lat)/2],
		GFLOPPerSample: 3 * tr.FLOPs() / float64(*batch) / 1e9, PeakGFLOPS: max(peak, kernel.PeakGFLOPS(*threads))}
	if r.PeakGFLOPS > 0 {
		r.FractionOfPeak = r.SamplesPerSec * r.GFLOPPerSample / r.PeakGFLOPS
		r.FractionP50 = float64(*batch) * r.GFLOPPerSample / (r.StepMsMedian / 1e3) / r.PeakGFLOPS
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("training %s, batch %d, threads %d, %s: %d steps\n", r.Model, r.Batch, r.Threads, r.Optimizer, r.Steps)
	fmt.Printf("throughput  %.1f samples/s (median step %.2f ms)\n", r.SamplesPerSec, r.StepMsMedian)
	fmt.Printf("work        %.4f GFLOP/sample (forward + backward)\n", r.GFLOPPerSample)
	fmt.Printf("reached     %.1f%% of the %.0f GFLOP/s FP32 peak (median step: %.1f%%)\n", 100*r.FractionOfPeak, r.PeakGFLOPS, 100*r.FractionP50)
	return nil
}

func volumeOf(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}
