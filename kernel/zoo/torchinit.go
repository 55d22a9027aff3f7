package zoo

import "math"

// InitTorch is the Options.Init value for PyTorch's training initialisation.
const InitTorch = "torch"

// convRule is how Init "torch" draws a convolution's weight and bias.
type convRule int

const (
	// convTorchDefault is nn.Conv2d's own reset_parameters: kaiming_uniform_(a=√5), which
	// is U(-1/√fan_in, 1/√fan_in), and the bias U(-1/√fan_in, 1/√fan_in).
	convTorchDefault convRule = iota
	// convKaimingFanOut is torchvision's kaiming_normal_(mode="fan_out", nonlinearity=
	// "relu"): N(0, √(2/fan_out)), bias 0. torch's fan_out is size(0) times the receptive
	// field, out*kh*kw, not divided by the groups (so a depthwise 3x3 conv of C channels
	// has fan_out 9C).
	convKaimingFanOut
)

// linearRule is how Init "torch" draws a fully connected layer's weight and bias.
type linearRule int

const (
	// linearTorchDefault is nn.Linear's own reset_parameters: weight and bias
	// U(-1/√in, 1/√in).
	linearTorchDefault linearRule = iota
	// linearNormal001 is torchvision's normal_(weight, 0, 0.01), bias 0.
	linearNormal001
)

// torchRules is one architecture's initialisation under Init "torch". BatchNormalization
// is always weight 1, bias 0, running mean 0, running variance 1.
type torchRules struct {
	conv   convRule
	linear linearRule
}

// convInit returns the weight and bias generators of a convolution.
func (r *torchRules) convInit(b *builder, fanIn, fanOut int64) (weight, bias func() float64) {
	if r.conv == convKaimingFanOut {
		return b.normal(math.Sqrt(2 / float64(fanOut))), constant(0)
	}
	bound := 1 / math.Sqrt(float64(fanIn))
	return b.uniform(-bound, bound), b.uniform(-bound, bound)
}

// linearInit returns the weight and bias generators of a fully connected layer.
func (r *torchRules) linearInit(b *builder, in int64) (weight, bias func() float64) {
	if r.linear == linearNormal001 {
		return b.normal(0.01), constant(0)
	}
	bound := 1 / math.Sqrt(float64(in))
	return b.uniform(-bound, bound), b.uniform(-bound, bound)
}
