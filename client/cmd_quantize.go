package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"idunno/kernel/onnx"
	"idunno/quantize"
	"idunno/sched/dataset"
)

const quantizeUsage = "quantize --model M.onnx --calibration DATA | --calibration INPUT=ARRAY.npy ... [--samples N] [--batch B] --out M.int8.onnx [preprocessing flags] [--eval-data IMAGES --eval-labels LABELS] [--threads T]"

func runQuantize(args []string) error {
	ownMachine()
	fs := newFlags("quantize")
	model := fs.String("model", "", "float ONNX model file")
	var calibs []string
	fs.Func("calibration", "calibration data: IDX or .npy file (gzip or plain), or a folder of PNG/JPEG images, for the model's\n"+
		"float input; or INPUT=ARRAY.npy for input INPUT (int64 token ids, masks, float features: one row per sample,\n"+
		"no preprocessing); repeat for every input", func(v string) error {
		calibs = append(calibs, v)
		return nil
	})
	samples := fs.Int("samples", 512, "calibration samples (the first N of the data)")
	batch := fs.Int("batch", 32, "calibration batch size")
	out := fs.String("out", "", "output QDQ model file")
	threads := fs.Int("threads", 0, "kernel threads (0: one per CPU)")
	evalData := fs.String("eval-data", "", "optional labelled data to compare the float and int8 models on (same preprocessing)")
	evalLabels := fs.String("eval-labels", "", "labels of --eval-data (IDX or .npy)")
	var pre dataset.Preprocess
	pre.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || len(calibs) == 0 || *out == "" || fs.NArg() > 0 || *samples < 1 || *batch < 1 {
		return usageError("usage: idunno " + quantizeUsage)
	}
	m, err := onnx.ReadFile(*model)
	if err != nil {
		return err
	}
	data, err := calibrationData(m, calibs, pre)
	if err != nil {
		return err
	}
	if len(data.Arrays) > 0 && *evalData != "" {
		return usageError("quantize: --eval-data compares models of one image input; this model's calibration data is named arrays")
	}
	batches, err := quantize.Batches(m, data, *samples, *batch)
	if err != nil {
		return err
	}
	ranges, err := quantize.Calibrate(m, batches, *threads)
	if err != nil {
		return err
	}
	qm, err := quantize.Rewrite(m, ranges)
	if err != nil {
		return err
	}
	if err := onnx.WriteFile(*out, qm); err != nil {
		return err
	}
	n := 0
	for _, b := range batches {
		n += int(b[0].Dims[0])
	}
	fmt.Printf("%s: %d activations calibrated on %d samples (min/max), weights int8 per channel\n", *out, len(ranges), n)
	if *evalData == "" {
		return nil
	}
	ev, err := loadLabelled(*evalData, *evalLabels, pre)
	if err != nil {
		return err
	}
	a, err := quantize.Compare(m, qm, ev.Images, ev.Labels, pre, 100, *threads)
	if err != nil {
		return err
	}
	fmt.Printf("%d samples: float top-1 %.2f%%, int8 top-1 %.2f%% (%+.2f points), same top-1 %.2f%%, max |diff| %.4g\n",
		a.Samples, 100*a.FloatTop1, 100*a.QuantTop1, 100*(a.QuantTop1-a.FloatTop1), 100*a.SameTop1, a.MaxAbsDiff)
	return nil
}

// calibrationData opens what the --calibration flags name: NAME=FILE binds model input NAME
// to a .npy array; any other value (at most one) is the data of the model's float input.
func calibrationData(m *onnx.Model, calibs []string, pre dataset.Preprocess) (quantize.Data, error) {
	d := quantize.Data{Pre: pre, Arrays: map[string]*dataset.Array{}}
	if m.Graph == nil {
		return d, errors.New("quantize: no model graph")
	}
	inputs := map[string]bool{}
	for _, in := range quantize.RunInputs(m) {
		inputs[in.Name] = true
	}
	var images string
	for _, c := range calibs {
		name, file, named := strings.Cut(c, "=")
		if named && !inputs[name] {
			if _, err := os.Stat(c); err != nil { // not a file name holding '='
				return d, fmt.Errorf("quantize: --calibration %s: the model has no input %q (its inputs: %s)", c, name, strings.Join(sortedKeys(inputs), ", "))
			}
			named = false
		}
		if !named {
			if images != "" {
				return d, fmt.Errorf("quantize: two unnamed --calibration values (%s, %s): name the input each one feeds (--calibration INPUT=FILE.npy)", images, c)
			}
			images = c
			continue
		}
		if d.Arrays[name] != nil {
			return d, fmt.Errorf("quantize: --calibration: input %q given twice", name)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return d, fmt.Errorf("quantize: calibration data for %s: %w", name, err)
		}
		if d.Arrays[name], err = dataset.ReadArray(b); err != nil {
			return d, fmt.Errorf("quantize: calibration data for %s (%s): %w", name, file, err)
		}
	}
	if images != "" {
		ds, err := openLocalDataset(images)
		if err != nil {
			return d, fmt.Errorf("quantize: calibration data: %w", err)
		}
		d.Images = ds
	}
	return d, nil
}

func sortedKeys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
