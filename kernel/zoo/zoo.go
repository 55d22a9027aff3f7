// Package zoo builds standard image-classification networks as ONNX models (opset 13)
// with deterministic seeded weights, for tests, the demo, the benchmarks and training.
package zoo

import (
	"fmt"
	"sort"
	"strings"

	"idunno/kernel/onnx"
)

// Opset is the default-domain opset the zoo writes.
const Opset = 13

// Options choose a model's input shape, class count and weights. Zero values take the
// architecture's defaults.
type Options struct {
	InputShape []int64 // C, H, W
	Classes    int64
	Seed       uint64

	// Init chooses the weights. "" (the default) writes weights tuned for inference demos:
	// He-scaled convolutions, BatchNormalization with seeded running statistics, small gains
	// on residual branches, and no Dropout. InitTorch ("torch") writes what PyTorch gives a
	// freshly constructed module, for training, drawn from Seed:
	//
	//   - lenet5 and alexnet (no init code of their own): nn.Conv2d and nn.Linear defaults,
	//     weight and bias U(-1/√fan_in, 1/√fan_in);
	//   - resnet18, resnet50: Conv kaiming_normal_(mode="fan_out", relu), N(0, √(2/fan_out))
	//     with fan_out = out*kh*kw; fc the nn.Linear default;
	//   - mobilenet_v2, vgg16: Conv as resnet, conv bias 0; Linear N(0, 0.01), bias 0;
	//   - squeezenet, inception_v3: the generic torch defaults (Conv and Linear as lenet5).
	//     torchvision's own code differs for these two: squeezenet draws kaiming_uniform_
	//     (a=0) and its final conv N(0, 0.01), biases 0; inception_v3 draws every Conv and
	//     Linear weight from N(0, 0.1) truncated to ±2;
	//   - every BatchNormalization: weight 1, bias 0, running mean 0, running variance 1,
	//     momentum 0.9 in ONNX's convention (torch's 0.1); epsilon as torchvision (1e-5,
	//     inception_v3's 1e-3);
	//   - Dropout nodes where torchvision has nn.Dropout (opset 13: ratio a constant input,
	//     training_mode absent, so inference passes values through): mobilenet_v2 p=0.2
	//     before its classifier; alexnet and vgg16 p=0.5 in theirs; squeezenet p=0.5 before
	//     its final conv; inception_v3 p=0.5 before fc. The node is named after the torch
	//     module ("classifier.0"); the ratio is the initializer "dropout_ratio_<p>".
	Init string
}

type arch struct {
	build    func(b *builder, x value, classes int64) value
	input    []int64 // default C, H, W
	classes  int64
	minInput int64      // smallest H and W the architecture accepts
	torch    torchRules // the initialisation under Init "torch"
}

var (
	torchDefaults = torchRules{convTorchDefault, linearTorchDefault}
	torchResNet   = torchRules{convKaimingFanOut, linearTorchDefault}
	torchVGG      = torchRules{convKaimingFanOut, linearNormal001} // also mobilenet_v2
)

var archs = map[string]arch{
	"lenet5":       {lenet5, []int64{1, 28, 28}, 10, 12, torchDefaults},
	"resnet18":     {resnet([4]int{2, 2, 2, 2}, false), []int64{3, 224, 224}, 1000, 32, torchResNet},
	"resnet50":     {resnet([4]int{3, 4, 6, 3}, true), []int64{3, 224, 224}, 1000, 32, torchResNet},
	"alexnet":      {alexnet, []int64{3, 224, 224}, 1000, 63, torchDefaults},
	"vgg16":        {vgg16, []int64{3, 224, 224}, 1000, 32, torchVGG},
	"mobilenet_v2": {mobilenetV2, []int64{3, 224, 224}, 1000, 32, torchVGG},
	"squeezenet":   {squeezenet, []int64{3, 224, 224}, 1000, 35, torchDefaults},
	"inception_v3": {inceptionV3, []int64{3, 299, 299}, 1000, 75, torchDefaults},
}

// Names lists the architectures Build knows.
func Names() []string {
	names := make([]string, 0, len(archs))
	for n := range archs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// DefaultInputShape returns the architecture's default C, H, W.
func DefaultInputShape(name string) ([]int64, error) {
	a, ok := archs[name]
	if !ok {
		return nil, unknown(name)
	}
	return append([]int64(nil), a.input...), nil
}

func unknown(name string) error {
	return fmt.Errorf("zoo: unknown model %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Build returns the named architecture as an ONNX model with input "input" of shape
// (N, C, H, W), N symbolic, and output "output" holding (N, classes) logits. The same
// name and options always give the same model, byte for byte (Options.Init says which
// weights).
func Build(name string, opt Options) (*onnx.Model, error) {
	a, ok := archs[name]
	if !ok {
		return nil, unknown(name)
	}
	shape := a.input
	if opt.InputShape != nil {
		shape = opt.InputShape
	}
	if len(shape) != 3 {
		return nil, fmt.Errorf("zoo: %s: input shape %v is not C,H,W", name, shape)
	}
	c, h, w := shape[0], shape[1], shape[2]
	if c < 1 || c > 64 || h < a.minInput || w < a.minInput || h > 4096 || w > 4096 {
		return nil, fmt.Errorf("zoo: %s: input shape %v out of range (C 1..64, H and W %d..4096)", name, shape, a.minInput)
	}
	classes := a.classes
	if opt.Classes != 0 {
		classes = opt.Classes
	}
	if classes < 1 || classes > 100000 {
		return nil, fmt.Errorf("zoo: %s: %d classes out of range (1..100000)", name, classes)
	}
	b := newBuilder(opt.Seed)
	switch opt.Init {
	case "":
	case InitTorch:
		rules := a.torch
		b.torch = &rules
	default:
		return nil, fmt.Errorf("zoo: %s: unknown init %q (want \"\" for the inference weights or %q)", name, opt.Init, InitTorch)
	}
	out := a.build(b, value{name: "input", c: c, h: h, w: w}, classes)
	if b.err != nil {
		return nil, fmt.Errorf("zoo: %s with input %v: %w", name, shape, b.err)
	}
	// Rename the last node's output to "output".
	last := b.g.Nodes[len(b.g.Nodes)-1]
	if last.Outputs[0] != out.name {
		panic("zoo: the last node does not produce the model output")
	}
	last.Outputs[0] = "output"
	b.g.Name = name
	b.g.Inputs = []onnx.ValueInfo{{Name: "input", DType: onnx.Float, Dims: []int64{-1, c, h, w},
		DimParams: []string{"N", "", "", ""}, HasShape: true}}
	b.g.Outputs = []onnx.ValueInfo{{Name: "output", DType: onnx.Float, Dims: []int64{-1, classes},
		DimParams: []string{"N", ""}, HasShape: true}}
	return &onnx.Model{
		IRVersion:    8,
		ProducerName: "idunno-zoo",
		Opset:        Opset,
		Opsets:       map[string]int64{"": Opset},
		Graph:        b.g,
	}, nil
}

// ParamCount counts the model's trainable parameters as PyTorch does: every initializer
// element except BatchNormalization running statistics and constant operands (Clip bounds,
// Dropout ratios).
func ParamCount(m *onnx.Model) int64 {
	notParam := map[string]bool{}
	for _, n := range m.Graph.Nodes {
		switch n.OpType {
		case "BatchNormalization":
			for _, in := range n.Inputs[3:] {
				notParam[in] = true
			}
		case "Clip", "Dropout":
			for _, in := range n.Inputs[1:] {
				notParam[in] = true
			}
		}
	}
	var total int64
	for name, t := range m.Graph.Initializers {
		if !notParam[name] {
			total += int64(t.Len())
		}
	}
	return total
}
