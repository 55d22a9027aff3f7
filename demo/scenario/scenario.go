// Package scenario drives a local IDunno cluster the way a user does (running the real
// `idunno` commands) and watches it through the scheduler's client API; the demo and the
// cluster benchmarks are written with it.
package scenario

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"idunno/client/localcluster"
	"idunno/rpc"
	"idunno/sched"
)

// Driver runs commands against one local cluster.
type Driver struct {
	Bin     string // the idunno binary
	Dir     string // working directory; the cluster lives in Dir/cluster
	Echo    bool   // print each command and its output
	Cluster *localcluster.Cluster
	rpc     *rpc.Client
	env     []string
}

// Up starts an n-node cluster in dir/cluster (basePort 0 picks a free one).
func Up(bin, dir string, n, basePort int, echo bool) (*Driver, error) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	d := &Driver{Bin: bin, Dir: dir, Echo: echo}
	cdir := filepath.Join(dir, "cluster")
	d.env = append(os.Environ(), "IDUNNO_CLUSTER="+cdir)
	args := []string{"cluster", "up", "--nodes", strconv.Itoa(n), "--dir", cdir}
	if basePort != 0 {
		args = append(args, "--base-port", strconv.Itoa(basePort))
	}
	if _, err := d.Run(args...); err != nil {
		return nil, err
	}
	if d.Cluster, err = localcluster.Open(cdir); err != nil {
		return nil, err
	}
	d.rpc = rpc.NewClient([]byte(d.Cluster.Secret()))
	return d, nil
}

// Down stops every node.
func (d *Driver) Down() error {
	_, err := d.Run("cluster", "down", "--dir", d.Cluster.Dir())
	return err
}

// Run runs one idunno command and returns its combined output.
func (d *Driver) Run(args ...string) (string, error) {
	if d.Echo {
		fmt.Printf("$ idunno %s\n", strings.Join(args, " "))
	}
	cmd := exec.Command(d.Bin, args...)
	cmd.Env = d.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if d.Echo {
		for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
			if l != "" {
				fmt.Println("  " + l)
			}
		}
	}
	if err != nil {
		return out.String(), fmt.Errorf("scenario: idunno %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Steps runs several commands in order and stops at the first failure.
func (d *Driver) Steps(cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := d.Run(c...); err != nil {
			return err
		}
	}
	return nil
}

// Call runs a scheduler client method on the first live node that answers.
func (d *Driver) Call(method string, args, reply any) error {
	last := fmt.Errorf("scenario: no live node")
	for _, n := range d.Cluster.Nodes() {
		if !d.Cluster.Running(n.Name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		last = d.rpc.CallJSON(ctx, n.RPCAddr, method, args, reply)
		cancel()
		if last == nil {
			return nil
		}
	}
	return last
}

// Stats returns a job's statistics.
func (d *Driver) Stats(job string) (sched.JobStatsReport, error) {
	var st sched.JobStatsReport
	err := d.Call("sched.job.stats", sched.NameArgs{Name: job}, &st)
	return st, err
}

// Job returns a job's summary.
func (d *Driver) Job(job string) (sched.JobSummary, error) {
	var s sched.JobSummary
	err := d.Call("sched.job.get", sched.NameArgs{Name: job}, &s)
	return s, err
}

// Info returns the coordinator's view of the cluster.
func (d *Driver) Info() (sched.ClusterInfo, error) {
	var i sched.ClusterInfo
	err := d.Call("sched.info", struct{}{}, &i)
	return i, err
}

// Serves reports whether node has a positive share of any of jobs.
func (d *Driver) Serves(node string, jobs ...string) bool {
	for _, j := range jobs {
		st, err := d.Stats(j)
		if err != nil {
			continue
		}
		for _, w := range st.Workers {
			if w.Name == node && w.Share > 0 {
				return true
			}
		}
	}
	return false
}

// Workers returns the running nodes that are neither coordinator nor standby.
func (d *Driver) Workers() ([]string, error) {
	info, err := d.Info()
	if err != nil {
		return nil, err
	}
	var ws []string
	for _, n := range d.Cluster.Nodes() {
		if n.Name != info.Coordinator && n.Name != info.Standby && d.Cluster.Running(n.Name) {
			ws = append(ws, n.Name)
		}
	}
	return ws, nil
}

// WaitUntil polls cond every 20 ms until it holds and returns the time that took.
func WaitUntil(limit time.Duration, cond func() bool) (time.Duration, error) {
	t0 := time.Now()
	for time.Since(t0) < limit {
		if cond() {
			return time.Since(t0), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return limit, fmt.Errorf("scenario: condition not met within %v", limit)
}

// IDXPrefix writes the first n images of a (gzipped) IDX image file as a plain IDX file.
func IDXPrefix(src, dst string, n int) error {
	return idxPrefix(src, dst, n, 0x803, 16, func(hdr []byte) int64 {
		return int64(binary.BigEndian.Uint32(hdr[8:])) * int64(binary.BigEndian.Uint32(hdr[12:]))
	})
}

// LabelsPrefix writes the first n labels of a (gzipped) IDX label file as a plain IDX file.
func LabelsPrefix(src, dst string, n int) error {
	return idxPrefix(src, dst, n, 0x801, 8, func([]byte) int64 { return 1 })
}

// idxPrefix copies the header (hdrLen bytes, magic first, then the item count) with the
// count set to n, then the first n items of itemSize(header) bytes each.
func idxPrefix(src, dst string, n int, magic uint32, hdrLen int, itemSize func(hdr []byte) int64) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("scenario: %w (Debian's dataset-fashion-mnist provides it)", err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	if strings.HasSuffix(src, ".gz") {
		if r, err = gzip.NewReader(r); err != nil {
			return err
		}
	}
	hdr := make([]byte, hdrLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(hdr) != magic || int(binary.BigEndian.Uint32(hdr[4:])) < n {
		return fmt.Errorf("scenario: %s is not an IDX file of type %#x with %d items", src, magic, n)
	}
	binary.BigEndian.PutUint32(hdr[4:], uint32(n))
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	if _, err := out.Write(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(out, r, itemSize(hdr)*int64(n)); err != nil {
		return err
	}
	return out.Close()
}

// CheckResult reads a result CSV and counts answered, missing and repeated query ids.
func CheckResult(path string, want int) (answered, lost, dup int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if lines[0] != "query,top1,score" {
		return 0, 0, 0, fmt.Errorf("scenario: %s: missing header query,top1,score", path)
	}
	seen := make([]int, want)
	for _, l := range lines[1:] {
		q, _, _ := strings.Cut(l, ",")
		id, err := strconv.Atoi(q)
		if err != nil || id < 0 || id >= want {
			return 0, 0, 0, fmt.Errorf("scenario: %s: bad line %q", path, l)
		}
		seen[id]++
	}
	for _, c := range seen {
		if c == 0 {
			lost++
		} else {
			answered++
			dup += c - 1
		}
	}
	return answered, lost, dup, nil
}
