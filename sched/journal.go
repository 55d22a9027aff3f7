package sched

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Journal is the coordinator state's file on local disk (DATA_DIR/sched/journal). Each line
// is "S <crc32> <snapshot JSON>", "T <crc32> <job statistics JSON>" or "E <crc32> <entry
// JSON>"; the file starts with at most one snapshot (and the job statistics as of it),
// followed by entries. The statistics and the entries read back at open (Recovered) let a
// node rebuild every job's latencies, rates and costs after a restart of every node. A line that fails its checksum or does not apply ends the
// journal: it is the torn tail of a write cut short by a crash, and is cut off on open.
//
// Appends are not fsynced one by one: a process killed with SIGKILL loses nothing the kernel
// has, and a change is acknowledged only once the standby holds it too. Without a standby the
// coordinator calls Sync before it acknowledges (see replicator). Snapshots are fsynced before
// they replace the file. Its methods are safe for concurrent use (the replicator syncs while
// the coordinator appends).
type Journal struct {
	path string

	mu      sync.Mutex
	f       *os.File
	entries int // entries since the snapshot; Compact rewrites past CompactAfter
	closed  bool
	rec     *Recovered
}

// Recovered is what a journal held besides the state when it was opened: the job
// statistics saved with its snapshot, and the entries after it, in order.
type Recovered struct {
	Stats   map[string]*StatsSnapshot
	Entries []*Entry
}

// CompactAfter is how many entries the journal holds before it is rewritten as a snapshot.
const CompactAfter = 20000

// MaxJournalLine bounds one line of the journal (a snapshot of many large jobs included).
const MaxJournalLine = 64 << 20

// OpenJournal opens (or creates) the journal under dir and returns the state it holds.
func OpenJournal(dir string) (*Journal, *State, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("sched: journal: %w", err)
	}
	path := filepath.Join(dir, "journal")
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, nil, fmt.Errorf("sched: journal: %w", err)
	}
	rec := &Recovered{}
	st, good, n, _ := decodeJournal(data, rec)
	if good < len(data) {
		if err := os.Truncate(path, int64(good)); err != nil {
			return nil, nil, fmt.Errorf("sched: journal: cut torn tail: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("sched: journal: %w", err)
	}
	return &Journal{path: path, f: f, entries: n, rec: rec}, st, nil
}

// TakeRecovered returns what the journal held besides the state when it was opened (once;
// later calls return an empty Recovered).
func (j *Journal) TakeRecovered() Recovered {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.rec
	j.rec = nil
	if r == nil {
		return Recovered{}
	}
	return *r
}

// DecodeJournal rebuilds the state from a journal's bytes. It returns the state, how many
// leading bytes were good, how many entries followed the snapshot, and why decoding stopped
// early (nil when every byte was good).
func DecodeJournal(data []byte) (st *State, good, entries int, stop error) {
	return decodeJournal(data, nil)
}

// decodeJournal is DecodeJournal that also collects, into rec if not nil, the statistics
// line and the entries.
func decodeJournal(data []byte, rec *Recovered) (st *State, good, entries int, stop error) {
	st = NewState()
	snapshotEnd := -1 // where the line after the snapshot starts
	for off := 0; off < len(data); {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			return st, off, entries, fmt.Errorf("sched: journal: torn last line at byte %d", off)
		}
		line := data[off : off+nl]
		kind, payload, err := splitLine(line)
		if err != nil {
			return st, off, entries, err
		}
		switch {
		case kind == 'S' && off == 0:
			var s State
			if err := json.Unmarshal(payload, &s); err != nil {
				return st, off, entries, fmt.Errorf("sched: journal: snapshot: %w", err)
			}
			if err := s.validate(); err != nil {
				return st, off, entries, err
			}
			st = &s
			snapshotEnd = off + nl + 1
		case kind == 'T' && off == snapshotEnd:
			var ss map[string]*StatsSnapshot
			if err := json.Unmarshal(payload, &ss); err != nil {
				return st, off, entries, fmt.Errorf("sched: journal: statistics: %w", err)
			}
			if rec != nil {
				rec.Stats = ss
			}
		case kind == 'E':
			var e Entry
			if err := json.Unmarshal(payload, &e); err != nil {
				return st, off, entries, fmt.Errorf("sched: journal: entry: %w", err)
			}
			if err := st.Apply(&e); err != nil {
				return st, off, entries, err
			}
			entries++
			if rec != nil {
				rec.Entries = append(rec.Entries, &e)
			}
		default:
			return st, off, entries, fmt.Errorf("sched: journal: unexpected %q line at byte %d", kind, off)
		}
		off += nl + 1
		good = off
	}
	return st, good, entries, nil
}

func splitLine(line []byte) (byte, []byte, error) {
	if len(line) < 11 || line[1] != ' ' || line[10] != ' ' {
		return 0, nil, fmt.Errorf("sched: journal: malformed line")
	}
	sum, err := strconv.ParseUint(string(line[2:10]), 16, 32)
	if err != nil {
		return 0, nil, fmt.Errorf("sched: journal: malformed checksum")
	}
	payload := line[11:]
	if crc32.ChecksumIEEE(payload) != uint32(sum) {
		return 0, nil, fmt.Errorf("sched: journal: checksum mismatch")
	}
	return line[0], payload, nil
}

func appendLine(b []byte, kind byte, v any) ([]byte, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("sched: journal: encode: %w", err)
	}
	return appendPayload(b, kind, payload)
}

func appendPayload(b []byte, kind byte, payload []byte) ([]byte, error) {
	if len(payload) > MaxJournalLine {
		return nil, fmt.Errorf("sched: journal: line of %d bytes over the limit", len(payload))
	}
	b = append(b, kind, ' ')
	b = fmt.Appendf(b, "%08x ", crc32.ChecksumIEEE(payload))
	b = append(b, payload...)
	return append(b, '\n'), nil
}

// Append writes one entry.
func (j *Journal) Append(e *Entry) error {
	payload, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("sched: journal: encode: %w", err)
	}
	return j.AppendEncoded(payload)
}

// AppendEncoded writes one entry already encoded as JSON (the bytes json.Marshal gives
// for it: the coordinator encodes an entry once, for its journal and for the standby).
func (j *Journal) AppendEncoded(payload []byte) error {
	line, err := appendPayload(nil, 'E', payload)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return fmt.Errorf("sched: journal: closed")
	}
	if _, err := j.f.Write(line); err != nil {
		return fmt.Errorf("sched: journal: write: %w", err)
	}
	j.entries++
	return nil
}

// NeedsCompaction reports whether the journal should be rewritten as a snapshot.
func (j *Journal) NeedsCompaction() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.entries >= CompactAfter
}

// Sync flushes every entry written so far to stable storage.
func (j *Journal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return fmt.Errorf("sched: journal: closed")
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sched: journal: sync: %w", err)
	}
	return nil
}

// Reset replaces the journal by a snapshot of st (atomically: write aside, then rename).
func (j *Journal) Reset(st *State) error { return j.ResetWithStats(st, nil) }

// ResetWithStats is Reset that also saves the job statistics as of the snapshot (nil: none).
func (j *Journal) ResetWithStats(st *State, stats map[string]*StatsSnapshot) error {
	line, err := appendLine(nil, 'S', st)
	if err != nil {
		return err
	}
	if stats != nil {
		if line, err = appendLine(line, 'T', stats); err != nil {
			return err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return fmt.Errorf("sched: journal: closed")
	}
	tmp := j.path + ".tmp"
	if err := writeSynced(tmp, line); err != nil {
		return fmt.Errorf("sched: journal: snapshot: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return fmt.Errorf("sched: journal: snapshot: %w", err)
	}
	if d, err := os.Open(filepath.Dir(j.path)); err == nil {
		d.Sync() // the rename itself
		d.Close()
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("sched: journal: %w", err)
	}
	j.f.Close()
	j.f, j.entries = f, 0
	return nil
}

// writeSynced writes data to a new file at path and fsyncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Close closes the file; later calls do nothing.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	return j.f.Close()
}
