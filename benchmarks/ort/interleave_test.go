package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestAlternateServers runs the interleaved driver's protocol against two servers of
// `idunno bench kernel --serve` (ONNX Runtime needs node and its npm package; the protocol
// is the same): both get the same number of slices, each past the total, and the sums
// agree with the slices (images = batches x batch, the minimum at most the median).
// Skipped without IDUNNO_BIN (make test sets it).
func TestAlternateServers(t *testing.T) {
	bin := os.Getenv("IDUNNO_BIN")
	if bin == "" {
		t.Skip("IDUNNO_BIN unset (make test sets it)")
	}
	model := filepath.Join(t.TempDir(), "lenet5.onnx")
	if b, err := exec.Command(bin, "zoo", "lenet5", "--out", model).CombinedOutput(); err != nil {
		t.Fatalf("zoo: %v\n%s", err, b)
	}
	var servers []*server
	for _, name := range []string{"a", "b"} {
		s, err := startServer(name, exec.Command(bin, "bench", "kernel", "--model", model, "--batch", "3", "--threads", "1",
			"--seconds", "1", "--serve"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer s.stop()
		if !s.ready.Ready || s.ready.GFLOPPerImage <= 0 {
			t.Fatalf("%s: ready line %+v", name, s.ready)
		}
		servers = append(servers, s)
	}
	if err := alternate(servers, 0.2, 0.05); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if s.secs < 0.2 || s.slices < 4 || s.slices != servers[0].slices {
			t.Errorf("%s: %d slices, %.3f s (want >= 4 slices, as many as the other, >= 0.2 s)", s.name, s.slices, s.secs)
		}
		r := s.result("fp32")
		if s.images != float64(3*len(s.lat)) || r.Minms <= 0 || r.Minms > r.P50ms || r.ImagesPerSec <= 0 || r.PerCPUSecond <= 0 {
			t.Errorf("%s: %d batches, %v images, result %+v", s.name, len(s.lat), s.images, r)
		}
	}
}
