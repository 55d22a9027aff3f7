package sdfs

// volume.go: an append-only log of small unsynced versions (task results), so that storing
// one costs a replica an append to an open file, not a new file.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
)

// A volume holds records in numbered files (DATA_DIR/sdfs/vol/000001, ...), appending to
// the newest until it reaches maxSize. A record is
//
//	"SDV1" | kind (1 byte) | manifest length (uint32) | body length (uint32) |
//	manifest JSON | body | CRC-32 (IEEE) of kind..body
//
// with lengths and CRC little-endian. Kind recPut stores a version (its manifest and its
// one block); recDrop ({"name", "version"} as a manifest) removes one. A later record of a
// version replaces an earlier one (a repaired block is appended again). Records are not
// fsynced: these versions are durable by their replicas. Replay skips a whole record that
// fails its CRC (damaged on disk: the repair scan copies the version back), and stops at
// the first that does not parse or is cut short, truncating the file there (the tail a
// crash cut short), so appends continue after the last good record.
type volume struct {
	dir     string
	maxSize int64

	mu    sync.Mutex
	files map[int]*os.File // every file, open for reading (the newest also for appending)
	cur   int              // the newest file's number
	size  int64            // its size
}

// volLoc is where a version's block sits in a volume.
type volLoc struct {
	file int
	off  int64
	n    int
}

const (
	recPut  byte = 'P'
	recDrop byte = 'D'

	volMagic     = "SDV1"
	volHeaderLen = 4 + 1 + 4 + 4
	// volMaxRecord bounds a record's manifest and body at replay (a corrupt length must not
	// make replay allocate gigabytes).
	volMaxRecord = 64 << 20
	// volFileSize is when the volume starts a new file.
	volFileSize = 256 << 20
)

// openVolume opens the volume in dir (creating it), replaying every record in order into
// fn, with loc set for puts.
func openVolume(dir string, maxSize int64, fn func(kind byte, manifest []byte, loc volLoc)) (*volume, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sdfs: volume: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sdfs: volume: %w", err)
	}
	var nums []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && e.Type().IsRegular() {
			nums = append(nums, n)
		}
	}
	sort.Ints(nums)
	v := &volume{dir: dir, maxSize: maxSize, files: map[int]*os.File{}}
	for _, n := range nums {
		f, err := os.OpenFile(v.path(n), os.O_RDWR, 0o644)
		if err != nil {
			v.close()
			return nil, fmt.Errorf("sdfs: volume: %w", err)
		}
		v.files[n] = f
		b, err := io.ReadAll(f)
		if err != nil {
			v.close()
			return nil, fmt.Errorf("sdfs: volume: read %s: %w", f.Name(), err)
		}
		good := parseRecords(b, func(kind byte, manifest []byte, bodyOff int64, bodyLen int) {
			fn(kind, manifest, volLoc{file: n, off: bodyOff, n: bodyLen})
		})
		if good < int64(len(b)) {
			if err := f.Truncate(good); err != nil {
				v.close()
				return nil, fmt.Errorf("sdfs: volume: cut %s to its last good record: %w", f.Name(), err)
			}
		}
		v.cur, v.size = n, good
	}
	if v.cur == 0 {
		if err := v.startFile(1); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (v *volume) path(n int) string { return filepath.Join(v.dir, fmt.Sprintf("%06d", n)) }

func (v *volume) startFile(n int) error {
	f, err := os.OpenFile(v.path(n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("sdfs: volume: %w", err)
	}
	v.files[n], v.cur, v.size = f, n, 0
	return nil
}

// parseRecords calls fn for each intact record of the well-formed prefix of b (records
// failing their CRC are skipped) and returns the length of that prefix.
func parseRecords(b []byte, fn func(kind byte, manifest []byte, bodyOff int64, bodyLen int)) int64 {
	off := 0
	for len(b)-off >= volHeaderLen {
		h := b[off:]
		if string(h[:4]) != volMagic || (h[4] != recPut && h[4] != recDrop) {
			break
		}
		ml, bl := binary.LittleEndian.Uint32(h[5:]), binary.LittleEndian.Uint32(h[9:])
		if ml > volMaxRecord || bl > volMaxRecord {
			break
		}
		end := volHeaderLen + int(ml) + int(bl)
		if len(h) < end+4 {
			break
		}
		if crc32.ChecksumIEEE(h[4:end]) == binary.LittleEndian.Uint32(h[end:]) {
			fn(h[4], h[volHeaderLen:volHeaderLen+int(ml)], int64(off+volHeaderLen+int(ml)), int(bl))
		}
		off += end + 4
	}
	return int64(off)
}

// appendRecord appends one record and returns where its body is.
func (v *volume) appendRecord(kind byte, manifest, body []byte) (volLoc, error) {
	if len(manifest) > volMaxRecord || len(body) > volMaxRecord {
		return volLoc{}, fmt.Errorf("sdfs: volume: record of %d+%d bytes too large", len(manifest), len(body))
	}
	rec := make([]byte, volHeaderLen, volHeaderLen+len(manifest)+len(body)+4)
	copy(rec, volMagic)
	rec[4] = kind
	binary.LittleEndian.PutUint32(rec[5:], uint32(len(manifest)))
	binary.LittleEndian.PutUint32(rec[9:], uint32(len(body)))
	rec = append(append(rec, manifest...), body...)
	rec = binary.LittleEndian.AppendUint32(rec, crc32.ChecksumIEEE(rec[4:]))
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.files == nil {
		return volLoc{}, errVolumeClosed
	}
	if v.size > 0 && v.size+int64(len(rec)) > v.maxSize {
		if err := v.startFile(v.cur + 1); err != nil {
			return volLoc{}, err
		}
	}
	if _, err := v.files[v.cur].WriteAt(rec, v.size); err != nil {
		// a partial record is overwritten by the next append, or cut at replay
		return volLoc{}, fmt.Errorf("sdfs: volume: append: %w", err)
	}
	loc := volLoc{file: v.cur, off: v.size + volHeaderLen + int64(len(manifest)), n: len(body)}
	v.size += int64(len(rec))
	return loc, nil
}

var errVolumeClosed = errors.New("sdfs: volume closed")

// read returns the body at loc.
func (v *volume) read(loc volLoc) ([]byte, error) {
	v.mu.Lock()
	f := v.files[loc.file]
	v.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("sdfs: volume: no file %d", loc.file)
	}
	b := make([]byte, loc.n)
	if _, err := f.ReadAt(b, loc.off); err != nil {
		return nil, fmt.Errorf("sdfs: volume: read: %w", err)
	}
	return b, nil
}

func (v *volume) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, f := range v.files {
		f.Close()
	}
	v.files = nil
}
