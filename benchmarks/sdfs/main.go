// Command sdfs-bench measures SDFS on a local cluster of real node processes: put and get
// throughput for small and large files against a plain disk copy, the peak memory of a
// node during a large put, and the time to restore 4 replicas after 3 simultaneous crashes.
//
//	go run ./benchmarks/sdfs --bin bin/idunno [--big 1073741824] [--out benchmarks/out/sdfs.csv]
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"idunno/client/localcluster"
	"idunno/rpc"
	"idunno/sdfs"
)

func main() {
	bin := flag.String("bin", "bin/idunno", "idunno binary")
	nodes := flag.Int("nodes", 7, "cluster size (at least 7: 4 replicas + 3 spares)")
	small := flag.Int64("small", 1<<20, "small file size in bytes")
	big := flag.Int64("big", 1<<30, "large file size in bytes")
	smallRuns := flag.Int("small-runs", 20, "repetitions for the small file")
	bigRuns := flag.Int("big-runs", 2, "repetitions for the large file")
	out := flag.String("out", "benchmarks/out/sdfs.csv", "CSV output")
	parent := flag.String("work", "", "directory to create the scratch directory in (cluster and files; removed after); default the system's temporary directory")
	flag.Parse()
	log.SetFlags(0)

	if *parent != "" {
		if err := os.MkdirAll(*parent, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	d, err := os.MkdirTemp(*parent, "sdfs-bench")
	if err != nil {
		log.Fatal(err)
	}
	work := &d
	defer os.RemoveAll(*work)
	lc, err := localcluster.Up(filepath.Join(*work, "cluster"), *nodes, 0, *bin)
	if err != nil {
		log.Fatal(err)
	}
	defer lc.Down()
	rc := rpc.NewClient([]byte(lc.Secret()))
	var gw []string
	for _, n := range lc.Nodes() {
		gw = append(gw, n.RPCAddr)
	}
	c := sdfs.NewClient(sdfs.DefaultConfig(), rc, sdfs.GatewayMembers(rc, gw))
	ctx := context.Background()

	var rows [][]string
	row := func(metric string, size int64, runs int, value float64, unit string) {
		rows = append(rows, []string{metric, strconv.FormatInt(size, 10), strconv.Itoa(runs), fmt.Sprintf("%.3f", value), unit})
		fmt.Printf("%-28s %12d bytes  runs %-3d  %10.3f %s\n", metric, size, runs, value, unit)
	}

	for _, tc := range []struct {
		size int64
		runs int
	}{{*small, *smallRuns}, {*big, *bigRuns}} {
		src := filepath.Join(*work, fmt.Sprintf("src-%d", tc.size))
		if err := randomFile(src, tc.size); err != nil {
			log.Fatal(err)
		}
		name := fmt.Sprintf("bench/%d", tc.size)
		var cp, cpSync, put, get []float64
		for r := 0; r < tc.runs; r++ {
			dst := filepath.Join(*work, "cp-dst")
			cp = append(cp, mbps(tc.size, timeIt(func() error { return exec.Command("cp", src, dst).Run() })))
			os.Remove(dst)
			cpSync = append(cpSync, mbps(tc.size, timeIt(func() error {
				if err := exec.Command("cp", src, dst).Run(); err != nil {
					return err
				}
				return exec.Command("sync", dst).Run()
			})))
			os.Remove(dst)
			put = append(put, mbps(tc.size, timeIt(func() error { _, _, err := c.PutFile(ctx, src, name); return err })))
			get = append(get, mbps(tc.size, timeIt(func() error { _, err := c.GetFile(ctx, name, dst); return err })))
			if !sameFile(src, dst) {
				log.Fatalf("get of %s returned different bytes", name)
			}
			os.Remove(dst)
		}
		row("cp", tc.size, tc.runs, median(cp), "MB/s")
		row("cp+fsync", tc.size, tc.runs, median(cpSync), "MB/s")
		row("sdfs put (4 replicas)", tc.size, tc.runs, median(put), "MB/s")
		row("sdfs get", tc.size, tc.runs, median(get), "MB/s")
		if tc.size == *big {
			var peak int64
			for _, n := range lc.Nodes() {
				if kb := vmHWM(n.PID); kb > peak {
					peak = kb
				}
			}
			row("node peak RSS after puts+gets", tc.size, tc.runs, float64(peak)/1024, "MiB")
			if err := c.Delete(ctx, name); err != nil {
				log.Fatal(err)
			}
		}
		os.Remove(src)
	}

	// Small files (task results): latency of one put and one get of 1 KiB.
	tiny := make([]byte, 1024)
	rand.Read(tiny)
	var putLat, getLat []float64
	for r := 0; r < 50; r++ {
		putLat = append(putLat, timeIt(func() error { _, err := c.Put(ctx, "bench/tiny", bytes.NewReader(tiny)); return err }).Seconds()*1000)
		getLat = append(getLat, timeIt(func() error { _, err := c.Get(ctx, "bench/tiny", io.Discard); return err }).Seconds()*1000)
	}
	row("sdfs put latency p50", 1024, 50, median(putLat), "ms")
	row("sdfs get latency p50", 1024, 50, median(getLat), "ms")

	// Restore: put one large file, kill -9 three of its replicas at once, time until 4
	// live nodes hold it again.
	src := filepath.Join(*work, "src-restore")
	if err := randomFile(src, *big); err != nil {
		log.Fatal(err)
	}
	v, _, err := c.PutFile(ctx, src, "bench/restore")
	if err != nil {
		log.Fatal(err)
	}
	os.Remove(src)
	holders := holdersOf(ctx, c, "bench/restore", v)
	if len(holders) != 4 {
		log.Fatalf("restore: version on %v", holders)
	}
	if err := lc.Kill(holders[:3]...); err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	for {
		h := holdersOf(ctx, c, "bench/restore", v)
		if len(h) >= 4 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			log.Fatalf("restore: only %v after 10 minutes", h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	row("restore 4 replicas after 3 kills", *big, 1, time.Since(start).Seconds(), "s")

	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		log.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("metric,size_bytes,runs,value,unit\n")
	for _, r := range rows {
		b.WriteString(strings.Join(r, ",") + "\n")
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", *out)
}

func randomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		return err
	}
	return f.Sync()
}

func timeIt(f func() error) time.Duration {
	start := time.Now()
	if err := f(); err != nil {
		log.Fatal(err)
	}
	return time.Since(start)
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func sameFile(a, b string) bool {
	fa, err1 := os.Open(a)
	fb, err2 := os.Open(b)
	if err1 != nil || err2 != nil {
		return false
	}
	defer fa.Close()
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil {
			return true
		}
	}
}

// vmHWM is a process's peak resident set size in KiB, from /proc.
func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

func holdersOf(ctx context.Context, c *sdfs.Client, name string, v sdfs.Version) []string {
	hs, err := c.Ls(ctx, name)
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range hs {
		for _, vi := range h.Versions {
			if vi.Version == v {
				out = append(out, h.Node)
			}
		}
	}
	return out
}
