package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The interleaved mode (--interleave SLICE): both systems load a configuration once, as
// servers (`idunno bench kernel --serve`, `node bench.js ... serve`), and take turns in
// slices of SLICE seconds, ours and ORT's alternating with a short idle gap between them,
// until each has run --rounds x --seconds seconds. On this VM both systems' speeds change by
// 20-50% within seconds (ONNX Runtime's batch-1 text encoder: minima 92-136 ms in back-to-back
// runs of 3 s); rounds of several seconds each, with a model load between, let one system
// meet a fast phase the other never saw. Slices of half a second spread both over the same
// moments.

// sliceGap is the idle time between two slices: ONNX Runtime's pool threads spin for a
// while after a run (20 ms of CPU in the 50 ms after a slice, none after 250 ms).
const sliceGap = 250 * time.Millisecond

// sliceLine is one slice's report (both servers print it).
type sliceLine struct {
	Ready         bool      `json:"ready"`
	GFLOPPerImage float64   `json:"gflop_per_image"`
	CPUPeakGFLOPS float64   `json:"peak_gflops_per_cpu_second"`
	Runs          int       `json:"runs"`
	Batch         int       `json:"batch"`
	Seconds       float64   `json:"seconds"`
	CPUSeconds    float64   `json:"cpu_seconds"`
	LatMs         []float64 `json:"lat_ms"`
}

// server is one system's benchmark process in serve mode.
type server struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	ready sliceLine
	// totals over its slices
	lat                   []float64
	images, secs, cpuSecs float64
	slices                int
	slowestMs             float64 // its slowest batch, for the next slice's deadline
}

// startServer starts cmd and waits (at most limit) for its ready line.
func startServer(name string, cmd *exec.Cmd, limit time.Duration) (*server, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{name: name, cmd: cmd, in: in, lines: make(chan string, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	l, err := s.next(limit)
	if err == nil && !l.Ready {
		err = fmt.Errorf("first line is not ready")
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	s.ready = l
	return s, nil
}

func (s *server) next(limit time.Duration) (sliceLine, error) {
	select {
	case line, ok := <-s.lines:
		if !ok {
			return sliceLine{}, fmt.Errorf("exited")
		}
		var l sliceLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return sliceLine{}, fmt.Errorf("bad line %q: %v", line, err)
		}
		return l, nil
	case <-time.After(limit):
		return sliceLine{}, fmt.Errorf("no line after %v", limit)
	}
}

// slice runs one slice of secs seconds and adds it to the totals.
func (s *server) slice(secs float64) error {
	if _, err := fmt.Fprintln(s.in, strconv.FormatFloat(secs, 'f', 3, 64)); err != nil {
		return fmt.Errorf("%s: %v", s.name, err)
	}
	// at least one batch: a slow one may take far longer than the slice
	l, err := s.next(time.Duration((secs+4*s.slowestMs/1000)*float64(time.Second)) + 2*time.Minute)
	if err != nil {
		return fmt.Errorf("%s: %v", s.name, err)
	}
	s.lat = append(s.lat, l.LatMs...)
	for _, v := range l.LatMs {
		s.slowestMs = max(s.slowestMs, v)
	}
	s.images += float64(l.Runs * l.Batch)
	s.secs += l.Seconds
	s.cpuSecs += l.CPUSeconds
	s.slices++
	return nil
}

func (s *server) stop() {
	s.in.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// result sums the server's slices as one run would.
func (s *server) result(prec string) result {
	if len(s.lat) == 0 || s.secs == 0 {
		return result{}
	}
	l := append([]float64(nil), s.lat...)
	sort.Float64s(l)
	r := result{ImagesPerSec: s.images / s.secs, Minms: l[0], P50ms: l[len(l)/2], Precision: prec}
	if s.cpuSecs > 0 {
		r.PerCPUSecond = s.images / s.cpuSecs
		if s.ready.CPUPeakGFLOPS > 0 {
			r.Fraction = r.PerCPUSecond * s.ready.GFLOPPerImage / s.ready.CPUPeakGFLOPS
		}
	}
	return r
}

// interleaved measures one configuration in interleaved slices: ORT's result and each
// precision's (a precision that fails to start is reported and left out).
func interleaved(bin, dir, name, ortModel string, files map[string]string, precs []string, inputs string, batch, threads int,
	total, sliceSecs float64) (result, map[string]result, error) {
	const loadLimit = 10 * time.Minute
	ort, err := startServer("ort", exec.Command("node", filepath.Join(dir, "bench.js"), ortModel, strconv.Itoa(batch),
		"serve", strconv.Itoa(threads), inputs), loadLimit)
	if err != nil {
		return result{}, nil, err
	}
	defer ort.stop()
	servers := []*server{ort}
	for _, pr := range precs {
		if files[pr] == "" {
			continue
		}
		s, err := startServer(pr, exec.Command(bin, "bench", "kernel", "--model", files[pr], "--batch", strconv.Itoa(batch),
			"--threads", strconv.Itoa(threads), "--seconds", "1", "--precision", pr, "--serve"), loadLimit)
		if err != nil {
			fmt.Printf("skip %s batch %d %s: %v\n", name, batch, pr, err)
			continue
		}
		defer s.stop()
		servers = append(servers, s)
	}
	if err := alternate(servers, total, sliceSecs); err != nil {
		return result{}, nil, err
	}
	best := map[string]result{}
	for _, s := range servers[1:] {
		best[s.name] = s.result(s.name)
	}
	return ort.result("fp32"), best, nil
}

// alternate runs slices of sliceSecs on the servers in turn, reversing the order in every
// other round, until each has run total seconds.
func alternate(servers []*server, total, sliceSecs float64) error {
	for i := 0; ; i++ {
		doneAll := true
		for _, s := range servers {
			doneAll = doneAll && s.secs >= total
		}
		if doneAll {
			break
		}
		// alternate which system goes first in each pair of slices
		order := append([]*server(nil), servers...)
		if i%2 == 1 {
			for a, b := 0, len(order)-1; a < b; a, b = a+1, b-1 {
				order[a], order[b] = order[b], order[a]
			}
		}
		for _, s := range order {
			time.Sleep(sliceGap)
			if err := s.slice(sliceSecs); err != nil {
				return err
			}
		}
	}
	return nil
}
