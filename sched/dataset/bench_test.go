package dataset

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"syscall"
	"testing"
	"time"
)

// cpuClock measures the process's CPU time (user + system), so that figures taken on a
// shared, busy machine say what the code costs rather than how long it waited for a core.
type cpuClock struct{ start time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU(b *testing.B) *cpuClock {
	b.ResetTimer()
	return &cpuClock{start: cpuNow()}
}

// report adds cpu-ns/op and, per image, cpu-images/s (images per CPU-second).
func (c *cpuClock) report(b *testing.B, imagesPerOp int) {
	b.StopTimer()
	cpu := cpuNow() - c.start
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N*imagesPerOp)/cpu.Seconds(), "cpu-images/s")
	b.ReportMetric(float64(b.N*imagesPerOp)/b.Elapsed().Seconds(), "images/s")
}

func benchFashion(b *testing.B) (Dataset, []byte) {
	raw := gunzipBytes(b, readFile(b, fashionImages))
	ds, err := OpenIDX(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	return ds, raw
}

// benchBatch reports images/s of Batch for batches of 32 Fashion-MNIST images.
func benchBatch(b *testing.B, p Preprocess, dims []int64) {
	ds, _ := benchFashion(b)
	const bs = 32
	buf := make([]float32, 0)
	clk := startCPU(b)
	for i := 0; i < b.N; i++ {
		from := (i * bs) % (ds.Len() - bs)
		t, err := BatchInto(buf, ds, from, from+bs, p, dims)
		if err != nil {
			b.Fatal(err)
		}
		buf = t.F32
	}
	clk.report(b, bs)
}

// LeNet-style input: 28x28 grey, scaled.
func BenchmarkBatch28(b *testing.B) {
	benchBatch(b, Preprocess{Scale: 1.0 / 255, Mean: []float32{0.5}, Std: []float32{0.5}}, []int64{-1, 1, 28, 28})
}

// ResNet-style input: 28x28 grey resized to 224x224, grey to RGB, ImageNet normalisation.
func BenchmarkBatch224(b *testing.B) {
	benchBatch(b, Preprocess{Resize: [2]int{224, 224}, GreyToRGB: true, Scale: 1.0 / 255,
		Mean: []float32{0.485, 0.456, 0.406}, Std: []float32{0.229, 0.224, 0.225}}, []int64{-1, 3, 224, 224})
}

// BenchmarkDataPath is a worker's whole data path for one task of 256 queries: decode the
// dataset file from bytes (as read from SDFS), then batch the task's queries 32 at a time
// into a reused buffer.
func BenchmarkDataPath(b *testing.B) {
	_, raw := benchFashion(b)
	benchDataPath(b, raw)
}

// BenchmarkDataPathGzip is BenchmarkDataPath on the gzip-compressed file as Debian ships it.
func BenchmarkDataPathGzip(b *testing.B) {
	benchDataPath(b, readFile(b, fashionImages))
}

func benchDataPath(b *testing.B, raw []byte) {
	const task, bs = 256, 32
	p := Preprocess{Scale: 1.0 / 255}
	dims := []int64{-1, 1, 28, 28}
	b.SetBytes(int64(len(raw)))
	var buf []float32 // one buffer per model, as a worker keeps it
	clk := startCPU(b)
	for i := 0; i < b.N; i++ {
		ds, err := OpenBytes(raw)
		if err != nil {
			b.Fatal(err)
		}
		for from := 0; from < task; from += bs {
			t, err := BatchInto(buf, ds, from, from+bs, p, dims)
			if err != nil {
				b.Fatal(err)
			}
			buf = t.F32
		}
	}
	clk.report(b, task)
}

// BenchmarkImagesJPEG224 is the folder-of-images path: decode 224x224 colour JPEGs and batch
// them with ImageNet normalisation, 8 at a time.
func BenchmarkImagesJPEG224(b *testing.B) {
	img := image.NewRGBA(image.Rect(0, 0, 224, 224))
	for y := 0; y < 224; y++ {
		for x := 0; x < 224; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), uint8(x ^ y), 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("img/%03d.jpg", i)
	}
	ds, err := OpenImages(names, func(string) ([]byte, error) { return buf.Bytes(), nil })
	if err != nil {
		b.Fatal(err)
	}
	p := Preprocess{Scale: 1.0 / 255, Mean: []float32{0.485, 0.456, 0.406}, Std: []float32{0.229, 0.224, 0.225}}
	const bs = 8
	var out []float32
	clk := startCPU(b)
	for i := 0; i < b.N; i++ {
		from := (i * bs) % (len(names) - bs)
		t, err := BatchInto(out, ds, from, from+bs, p, []int64{-1, 3, 224, 224})
		if err != nil {
			b.Fatal(err)
		}
		out = t.F32
	}
	clk.report(b, bs)
}
