package dataset

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// Preprocess says how a sample becomes model input. Steps, in order: Resize (bilinear, to
// Resize[0] rows by Resize[1] columns; 0 = keep the size), GreyToRGB (a one-channel image
// is copied into three channels), then v = (x*Scale - Mean[c]) / Std[c] for each value x of
// channel c. Scale 0 means 1; Mean and Std hold one value for every channel or one per
// channel, and empty means 0 and 1.
type Preprocess struct {
	Resize    [2]int    `json:"resize,omitempty"`
	GreyToRGB bool      `json:"grey_to_rgb,omitempty"`
	Mean      []float32 `json:"mean,omitempty"`
	Std       []float32 `json:"std,omitempty"`
	Scale     float32   `json:"scale,omitempty"`
}

// Flags registers --resize HxW, --grey-to-rgb, --mean a,b,c, --std a,b,c and --scale S on fs,
// writing into p (its current values are the defaults). --scale also takes a fraction
// such as 1/255.
func (p *Preprocess) Flags(fs *flag.FlagSet) {
	fs.Var(resizeFlag{p}, "resize", "resize images to `HxW` (bilinear) before anything else")
	fs.BoolVar(&p.GreyToRGB, "grey-to-rgb", p.GreyToRGB, "copy one-channel images into three channels")
	fs.Var(floatsFlag{&p.Mean}, "mean", "per-channel `a,b,c` subtracted after scaling")
	fs.Var(floatsFlag{&p.Std}, "std", "per-channel `a,b,c` divided by after subtracting the mean")
	fs.Var(scaleFlag{&p.Scale}, "scale", "multiply raw values by `S` first (e.g. 1/255)")
}

// Validate checks the settings on their own (Batch checks them against data and model).
func (p Preprocess) Validate() error {
	if (p.Resize[0] == 0) != (p.Resize[1] == 0) || p.Resize[0] < 0 || p.Resize[1] < 0 ||
		p.Resize[0] > maxDim || p.Resize[1] > maxDim || int64(p.Resize[0])*int64(p.Resize[1]) > MaxImagePixels {
		return fmt.Errorf("dataset: bad resize %dx%d", p.Resize[0], p.Resize[1])
	}
	if len(p.Mean) > 4 || len(p.Std) > 4 {
		return errors.New("dataset: --mean and --std take at most 4 values (one per channel)")
	}
	for _, s := range p.Std {
		if s == 0 || s != s {
			return errors.New("dataset: --std values must be non-zero numbers")
		}
	}
	for _, m := range p.Mean {
		if m != m {
			return errors.New("dataset: --mean values must be numbers")
		}
	}
	if p.Scale != p.Scale {
		return errors.New("dataset: --scale must be a number")
	}
	return nil
}

// String renders p as the flags that would set it (empty for the identity).
func (p Preprocess) String() string {
	var parts []string
	if p.Resize[0] != 0 {
		parts = append(parts, fmt.Sprintf("--resize %dx%d", p.Resize[0], p.Resize[1]))
	}
	if p.GreyToRGB {
		parts = append(parts, "--grey-to-rgb")
	}
	if len(p.Mean) > 0 {
		parts = append(parts, "--mean "+floatsFlag{&p.Mean}.String())
	}
	if len(p.Std) > 0 {
		parts = append(parts, "--std "+floatsFlag{&p.Std}.String())
	}
	if p.Scale != 0 && p.Scale != 1 {
		parts = append(parts, "--scale "+strconv.FormatFloat(float64(p.Scale), 'g', -1, 32))
	}
	return strings.Join(parts, " ")
}

// affine returns a and b such that a*x + b is the normalised value of channel c.
func (p Preprocess) affine(c int) (a, b float32) {
	scale, mean, std := p.Scale, float32(0), float32(1)
	if scale == 0 {
		scale = 1
	}
	if len(p.Mean) == 1 {
		mean = p.Mean[0]
	} else if c < len(p.Mean) {
		mean = p.Mean[c]
	}
	if len(p.Std) == 1 {
		std = p.Std[0]
	} else if c < len(p.Std) {
		std = p.Std[c]
	}
	return scale / std, -mean / std
}

type resizeFlag struct{ p *Preprocess }

func (f resizeFlag) String() string {
	if f.p == nil || f.p.Resize[0] == 0 {
		return ""
	}
	return fmt.Sprintf("%dx%d", f.p.Resize[0], f.p.Resize[1])
}

func (f resizeFlag) Set(s string) error {
	h, w, ok := strings.Cut(strings.ToLower(s), "x")
	hi, err1 := strconv.Atoi(h)
	wi, err2 := strconv.Atoi(w)
	if !ok || err1 != nil || err2 != nil || hi <= 0 || wi <= 0 || hi > maxDim || wi > maxDim {
		return fmt.Errorf("dataset: --resize wants HxW with positive numbers, got %q", s)
	}
	f.p.Resize = [2]int{hi, wi}
	return nil
}

type floatsFlag struct{ v *[]float32 }

func (f floatsFlag) String() string {
	if f.v == nil {
		return ""
	}
	s := make([]string, len(*f.v))
	for i, x := range *f.v {
		s[i] = strconv.FormatFloat(float64(x), 'g', -1, 32)
	}
	return strings.Join(s, ",")
}

func (f floatsFlag) Set(s string) error {
	var out []float32
	for _, part := range strings.Split(s, ",") {
		x, err := parseFloat(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("dataset: want comma-separated numbers, got %q", s)
		}
		out = append(out, x)
	}
	if len(out) > 4 {
		return fmt.Errorf("dataset: at most 4 values (one per channel), got %d", len(out))
	}
	*f.v = out
	return nil
}

type scaleFlag struct{ v *float32 }

func (f scaleFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(*f.v), 'g', -1, 32)
}

func (f scaleFlag) Set(s string) error {
	x, err := parseFloat(s)
	if err != nil || x == 0 {
		return fmt.Errorf("dataset: --scale wants a non-zero number or fraction such as 1/255, got %q", s)
	}
	*f.v = x
	return nil
}

// parseFloat reads a number or a fraction "a/b".
func parseFloat(s string) (float32, error) {
	if num, den, ok := strings.Cut(s, "/"); ok {
		a, err1 := strconv.ParseFloat(num, 64)
		b, err2 := strconv.ParseFloat(den, 64)
		if err1 != nil || err2 != nil || b == 0 {
			return 0, errors.New("bad fraction")
		}
		return float32(a / b), nil
	}
	x, err := strconv.ParseFloat(s, 32)
	return float32(x), err
}
