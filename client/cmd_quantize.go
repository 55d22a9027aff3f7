package main

import (
	"errors"
	"fmt"

	"idunno/kernel/onnx"
	"idunno/quantize"
	"idunno/sched/dataset"
)

const quantizeUsage = "quantize --model M.onnx --calibration DATA [--samples N] [--batch B] --out M.int8.onnx [preprocessing flags] [--eval-data IMAGES --eval-labels LABELS] [--threads T]"

func runQuantize(args []string) error {
	fs := newFlags("quantize")
	model := fs.String("model", "", "float ONNX model file")
	calib := fs.String("calibration", "", "calibration data: IDX or .npy file (gzip or plain), or a folder of PNG/JPEG images")
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
	if *model == "" || *calib == "" || *out == "" || fs.NArg() > 0 || *samples < 1 || *batch < 1 {
		return usageError("usage: idunno " + quantizeUsage)
	}
	m, err := onnx.ReadFile(*model)
	if err != nil {
		return err
	}
	ds, err := openLocalDataset(*calib)
	if err != nil {
		return fmt.Errorf("quantize: calibration data: %w", err)
	}
	batches, err := calibrationBatches(m, ds, pre, *samples, *batch)
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
	n := min(*samples, ds.Len())
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

// calibrationBatches decodes the first samples of ds for m's only float input.
func calibrationBatches(m *onnx.Model, ds dataset.Dataset, pre dataset.Preprocess, samples, batch int) ([][]*onnx.Tensor, error) {
	if m.Graph == nil {
		return nil, errors.New("quantize: no model graph")
	}
	var inputs []onnx.ValueInfo
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; !init {
			inputs = append(inputs, in)
		}
	}
	if len(inputs) != 1 || inputs[0].DType != onnx.Float {
		return nil, fmt.Errorf("quantize: the model must have one float input (an image batch), has %d inputs", len(inputs))
	}
	dims := inputs[0].Dims
	if err := dataset.Check(ds, pre, dims); err != nil {
		return nil, fmt.Errorf("quantize: calibration data does not fit input %s %v: %w", inputs[0].Name, dims, err)
	}
	n := min(samples, ds.Len())
	var out [][]*onnx.Tensor
	for from := 0; from < n; from += batch {
		to := min(from+batch, n)
		if len(dims) > 0 && dims[0] > 0 {
			to = min(from+int(dims[0]), n) // a fixed batch: exactly that many, or stop
			if to-from != int(dims[0]) {
				break
			}
		}
		t, err := dataset.Batch(ds, from, to, pre, dims)
		if err != nil {
			return nil, fmt.Errorf("quantize: calibration samples %d-%d: %w", from, to, err)
		}
		out = append(out, []*onnx.Tensor{t})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("quantize: model input %s has batch %d; the data has only %d samples", inputs[0].Name, dims[0], ds.Len())
	}
	return out, nil
}
