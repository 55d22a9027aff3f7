package train

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
)

// checkpointMagic starts every checkpoint file.
const checkpointMagic = "IDKCKPT1"

// Limits on what a checkpoint may declare, so a bad file cannot ask for unbounded memory.
const (
	maxHeader = 1 << 20
	maxValues = 1 << 30
)

// Checkpoint is a run's state after a committed step: the step count, the job's
// fingerprint (a checkpoint resumes only the run it was written by) and the master state.
type Checkpoint struct {
	Step        int64  `json:"step"`
	Fingerprint string `json:"fingerprint"`
	NParams     int    `json:"params"`
	NStats      int    `json:"stats"`
	State       *State `json:"-"`
}

// ErrBadCheckpoint is wrapped by every decoding error.
var ErrBadCheckpoint = errors.New("train: bad checkpoint")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode writes: magic, header length (uint32 LE), JSON header, then params, opt1, opt2 and
// statistics as float32 LE, then the CRC-32C of everything before it.
func (c *Checkpoint) Encode(w io.Writer) error {
	s := c.State
	if s == nil || len(s.Opt1) != len(s.Params) || len(s.Opt2) != len(s.Params) {
		return fmt.Errorf("train: checkpoint without a consistent state")
	}
	c.NParams, c.NStats = len(s.Params), len(s.Stats)
	hdr, err := json.Marshal(c)
	if err != nil {
		return err
	}
	n := 4 * (3*len(s.Params) + len(s.Stats))
	var buf bytes.Buffer
	buf.Grow(len(checkpointMagic) + 4 + len(hdr) + n + 4) // one allocation, not a doubling series
	buf.WriteString(checkpointMagic)
	binary.Write(&buf, binary.LittleEndian, uint32(len(hdr)))
	buf.Write(hdr)
	b := make([]byte, n)
	off := 0
	for _, v := range [][]float32{s.Params, s.Opt1, s.Opt2, s.Stats} {
		for _, f := range v {
			binary.LittleEndian.PutUint32(b[off:], math.Float32bits(f))
			off += 4
		}
	}
	buf.Write(b)
	binary.Write(&buf, binary.LittleEndian, crc32.Checksum(buf.Bytes(), castagnoli))
	_, err = w.Write(buf.Bytes())
	return err
}

// DecodeCheckpoint reads a checkpoint, checking its size fields and checksum.
func DecodeCheckpoint(b []byte) (*Checkpoint, error) {
	bad := func(f string, a ...any) (*Checkpoint, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadCheckpoint, fmt.Sprintf(f, a...))
	}
	if len(b) < len(checkpointMagic)+8 || string(b[:len(checkpointMagic)]) != checkpointMagic {
		return bad("not a checkpoint (magic)")
	}
	if want, got := binary.LittleEndian.Uint32(b[len(b)-4:]), crc32.Checksum(b[:len(b)-4], castagnoli); want != got {
		return bad("checksum mismatch (file damaged or truncated)")
	}
	b = b[:len(b)-4]
	p := len(checkpointMagic)
	hl := int(binary.LittleEndian.Uint32(b[p:]))
	p += 4
	if hl > maxHeader || hl > len(b)-p {
		return bad("header length %d", hl)
	}
	var c Checkpoint
	if err := json.Unmarshal(b[p:p+hl], &c); err != nil {
		return bad("header: %v", err)
	}
	p += hl
	if c.NParams < 0 || c.NStats < 0 || c.NParams > maxValues || c.NStats > maxValues || c.Step < 0 {
		return bad("sizes %d/%d, step %d", c.NParams, c.NStats, c.Step)
	}
	need := 4 * (3*c.NParams + c.NStats)
	if len(b)-p != need {
		return bad("%d payload bytes, header says %d", len(b)-p, need)
	}
	read := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[p:]))
			p += 4
		}
		return v
	}
	c.State = &State{Params: read(c.NParams), Opt1: read(c.NParams), Opt2: read(c.NParams), Stats: read(c.NStats)}
	return &c, nil
}

// WriteFileAtomic writes data to path through a temporary file and a rename, so a reader
// (or a crash) sees the old file or the new one, never a part.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("train: write %s: %w", path, err)
	}
	return nil
}

// ReadCheckpointFile reads and decodes a checkpoint file.
func ReadCheckpointFile(path string) (*Checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	c, err := DecodeCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
