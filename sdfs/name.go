package sdfs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxNameLen bounds a file name in bytes.
const MaxNameLen = 1024

// ErrNotFound is returned when a name has no visible version.
var ErrNotFound = errors.New("sdfs: no such file")

// ValidateName accepts names made of path segments separated by "/", each segment of
// letters, digits, '.', '_', '-' and '+'; no empty segment, no "." or "..", at most
// MaxNameLen bytes. Names never reach the file system: blocks are stored by hash.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("sdfs: empty file name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("sdfs: file name longer than %d bytes", MaxNameLen)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("sdfs: bad file name %q: empty, \".\" or \"..\" path segment", name)
		}
		for i := 0; i < len(seg); i++ {
			if !nameByte(seg[i]) {
				return fmt.Errorf("sdfs: bad file name %q: byte %q not allowed (letters, digits, . _ - + /)", name, seg[i])
			}
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '+'
}

// ValidatePrefix accepts "" or a prefix that could begin a valid name.
func ValidatePrefix(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > MaxNameLen {
		return fmt.Errorf("sdfs: prefix longer than %d bytes", MaxNameLen)
	}
	for i := 0; i < len(p); i++ {
		if !nameByte(p[i]) && p[i] != '/' {
			return fmt.Errorf("sdfs: bad prefix %q", p)
		}
	}
	return nil
}

// Version orders the versions of one name: by Seq, then by Writer. A writer picks
// Seq = 1 + the newest Seq a read quorum reports, and a random Writer, so two concurrent
// puts get distinct versions and every replica agrees which one is newest.
type Version struct {
	Seq    uint64 `json:"seq"`
	Writer string `json:"writer"` // 16 lowercase hex digits
}

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	if v.Seq != w.Seq {
		return v.Seq < w.Seq
	}
	return v.Writer < w.Writer
}

// IsZero reports whether v is the zero version (no version).
func (v Version) IsZero() bool { return v.Seq == 0 && v.Writer == "" }

func (v Version) String() string { return fmt.Sprintf("%d.%s", v.Seq, v.Writer) }

// dirName is the version's directory name on disk; it sorts like Less.
func (v Version) dirName() string { return fmt.Sprintf("%020d-%s", v.Seq, v.Writer) }

// Validate checks that v can name a directory safely.
func (v Version) Validate() error {
	if v.Seq == 0 || len(v.Writer) != 16 || !isHex(v.Writer) {
		return fmt.Errorf("sdfs: bad version %q", v.String())
	}
	return nil
}

func parseDirName(s string) (Version, error) {
	seq, w, ok := strings.Cut(s, "-")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil || len(seq) != 20 {
		return Version{}, fmt.Errorf("sdfs: bad version directory %q", s)
	}
	v := Version{Seq: n, Writer: w}
	return v, v.Validate()
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
