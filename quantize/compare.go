package quantize

import (
	"fmt"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/sched/dataset"
)

// Agreement compares a float model with its quantized twin on labelled data.
type Agreement struct {
	Samples    int
	FloatTop1  float64 // accuracy of the float model
	QuantTop1  float64 // accuracy of the quantized model
	SameTop1   float64 // fraction of samples where both predict the same class
	MaxAbsDiff float64 // largest |float - quantized| output value
}

// Compare runs both models on every sample of images (labels may be nil: accuracies are
// then 0) in batches, with the same preprocessing.
func Compare(fm, qm *onnx.Model, images dataset.Dataset, labels []int64, pre dataset.Preprocess, batch, threads int) (Agreement, error) {
	var a Agreement
	if labels != nil && len(labels) != images.Len() {
		return a, fmt.Errorf("quantize: %d labels for %d images", len(labels), images.Len())
	}
	f, err := kernel.LoadModel(fm, kernel.Options{Threads: threads})
	if err != nil {
		return a, fmt.Errorf("quantize: float model: %w", err)
	}
	defer f.Close()
	q, err := kernel.LoadModel(qm, kernel.Options{Threads: threads})
	if err != nil {
		return a, fmt.Errorf("quantize: quantized model: %w", err)
	}
	defer q.Close()
	ins := f.Inputs()
	if len(ins) != 1 {
		return a, fmt.Errorf("quantize: the model must have one input")
	}
	var fc, qc, same int
	for from := 0; from < images.Len(); from += batch {
		to := min(from+batch, images.Len())
		t, err := dataset.Batch(images, from, to, pre, ins[0].Dims)
		if err != nil {
			return a, fmt.Errorf("quantize: samples %d-%d: %w", from, to, err)
		}
		fo, err := f.Run([]*onnx.Tensor{t})
		if err != nil {
			return a, err
		}
		qo, err := q.Run([]*onnx.Tensor{t})
		if err != nil {
			return a, err
		}
		if len(fo) == 0 || len(qo) == 0 || len(fo[0].F32) != len(qo[0].F32) || len(fo[0].Dims) != 2 {
			return a, fmt.Errorf("quantize: outputs differ in shape or are not (N, classes) logits")
		}
		classes := int(fo[0].Dims[1])
		for i := 0; i < to-from; i++ {
			fr, qr := fo[0].F32[i*classes:(i+1)*classes], qo[0].F32[i*classes:(i+1)*classes]
			fa, qa := argmax(fr), argmax(qr)
			if fa == qa {
				same++
			}
			if labels != nil {
				if int64(fa) == labels[from+i] {
					fc++
				}
				if int64(qa) == labels[from+i] {
					qc++
				}
			}
			for k := range fr {
				d := float64(fr[k] - qr[k])
				if d < 0 {
					d = -d
				}
				a.MaxAbsDiff = max(a.MaxAbsDiff, d)
			}
		}
	}
	n := images.Len()
	a.Samples = n
	a.FloatTop1 = float64(fc) / float64(n)
	a.QuantTop1 = float64(qc) / float64(n)
	a.SameTop1 = float64(same) / float64(n)
	return a, nil
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
