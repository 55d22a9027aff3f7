package kernel

import "testing"

func TestPeakGFLOPSPositive(t *testing.T) {
	for _, th := range []int{1, 2} {
		g := PeakGFLOPS(th)
		t.Logf("peak with %d threads: %.1f GFLOP/s", th, g)
		if g <= 0 {
			t.Fatalf("peak %v", g)
		}
	}
}
