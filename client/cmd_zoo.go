package main

import (
	"fmt"
	"strconv"
	"strings"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

const zooUsage = "zoo NAME --out FILE.onnx [--input-shape C,H,W] [--classes K] [--seed S] [--init torch] | zoo transformer_encoder --out FILE.onnx [--vocab V] [--length L] [--layers N] [--heads H] [--width D] [--classes K] [--seed S]"

func zooSummary() string {
	return "write a standard network (" + strings.Join(zoo.Names(), ", ") + ", " + zoo.TransformerEncoder + ") as ONNX with seeded weights"
}

func runZoo(args []string) error {
	fs := newFlags("zoo")
	out := fs.String("out", "", "ONNX file to write")
	shape := fs.String("input-shape", "", "input C,H,W (default: the architecture's)")
	classes := fs.Int64("classes", 0, "number of output classes (default: the architecture's)")
	seed := fs.Uint64("seed", 1, "seed of the weights")
	vocab := fs.Int64("vocab", 0, zoo.TransformerEncoder+": vocabulary size (default 30522)")
	length := fs.Int64("length", 0, zoo.TransformerEncoder+": tokens per query (default 128)")
	layers := fs.Int64("layers", 0, zoo.TransformerEncoder+": encoder layers (default 2)")
	heads := fs.Int64("heads", 0, zoo.TransformerEncoder+": attention heads (default 4)")
	width := fs.Int64("width", 0, zoo.TransformerEncoder+": model width (default 256)")
	initName := fs.String("init", "", "weights: empty (the default) for inference demos (He-scaled, BatchNormalization with\n"+
		"seeded statistics, no Dropout), or \""+zoo.InitTorch+"\" for training: what PyTorch gives a fresh\n"+
		"torchvision module (its conv/linear init, BatchNormalization 1/0/0/1, Dropout nodes), drawn from --seed")
	// Accept the model name before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %v", fs.Args())
	}
	if name == "" || *out == "" {
		return usageErrorf("usage: idunno zoo NAME --out FILE.onnx (models: %s)", strings.Join(zoo.Names(), ", "))
	}
	if name == zoo.TransformerEncoder {
		if *shape != "" || *initName != "" {
			return fmt.Errorf("zoo: %s takes --vocab, --length, --layers, --heads, --width, --classes, --seed", name)
		}
		m, err := zoo.BuildText(zoo.TextOptions{Vocab: *vocab, Length: *length, Layers: *layers, Heads: *heads,
			Width: *width, Classes: *classes, Seed: *seed})
		if err != nil {
			return err
		}
		if err := onnx.WriteFile(*out, m); err != nil {
			return err
		}
		fmt.Printf("wrote %s: %s, inputs ids and mask (N,%d) int64, %d classes, %d parameters\n",
			*out, name, m.Graph.Inputs[0].Dims[1], m.Graph.Outputs[0].Dims[1], zoo.ParamCount(m))
		return nil
	}
	if *vocab != 0 || *length != 0 || *layers != 0 || *heads != 0 || *width != 0 {
		return fmt.Errorf("zoo: --vocab, --length, --layers, --heads and --width are for %s", zoo.TransformerEncoder)
	}
	opt := zoo.Options{Classes: *classes, Seed: *seed, Init: *initName}
	if *shape != "" {
		for _, f := range strings.Split(*shape, ",") {
			d, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return fmt.Errorf("zoo: --input-shape %q: want C,H,W", *shape)
			}
			opt.InputShape = append(opt.InputShape, d)
		}
	}
	m, err := zoo.Build(name, opt)
	if err != nil {
		return err
	}
	if err := onnx.WriteFile(*out, m); err != nil {
		return err
	}
	in := m.Graph.Inputs[0].Dims
	weights := ""
	if *initName != "" {
		weights = ", " + *initName + " init"
	}
	fmt.Printf("wrote %s: %s, input (N,%d,%d,%d), %d classes, %d parameters%s\n",
		*out, name, in[1], in[2], in[3], m.Graph.Outputs[0].Dims[1], zoo.ParamCount(m), weights)
	return nil
}
