package sdfs

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Manifest describes one committed version of a file: its blocks and their SHA-256 sums.
// A tombstone (Deleted) has no blocks and hides every older version.
type Manifest struct {
	Name      string   `json:"name"`
	Version   Version  `json:"version"`
	Size      int64    `json:"size"`
	BlockSize int      `json:"block_size"`
	Sums      []string `json:"sums"` // hex SHA-256 of each block, in order
	Deleted   bool     `json:"deleted,omitempty"`
	Created   int64    `json:"created"` // unix nanoseconds, set by the writer
	// Pending marks a version committed by a put that has not confirmed it yet (on disk
	// only): it is invisible, and dropped at start, since its put was never acknowledged.
	Pending bool `json:"pending,omitempty"`
}

// VersionInfo is a manifest without its block sums, as stat and list report it.
type VersionInfo struct {
	Version Version `json:"version"`
	Size    int64   `json:"size"`
	Deleted bool    `json:"deleted,omitempty"`
	Created int64   `json:"created"`
}

func (m *Manifest) info() VersionInfo {
	return VersionInfo{Version: m.Version, Size: m.Size, Deleted: m.Deleted, Created: m.Created}
}

// blockLen is the length of block i.
func (m *Manifest) blockLen(i int) int {
	if i < len(m.Sums)-1 {
		return m.BlockSize
	}
	return int(m.Size - int64(m.BlockSize)*int64(len(m.Sums)-1))
}

// Validate checks a manifest from the network or the disk against the limits in cfg.
func (m *Manifest) Validate(cfg Config) error {
	if err := ValidateName(m.Name); err != nil {
		return err
	}
	if err := m.Version.Validate(); err != nil {
		return err
	}
	if m.Deleted {
		if m.Size != 0 || len(m.Sums) != 0 {
			return fmt.Errorf("sdfs: tombstone of %s has data", m.Name)
		}
		return nil
	}
	if m.Size < 0 || m.Size > cfg.MaxFileSize {
		return fmt.Errorf("sdfs: %s: size %d outside [0, %d]", m.Name, m.Size, cfg.MaxFileSize)
	}
	if m.BlockSize <= 0 || m.BlockSize > cfg.MaxBlockSize {
		return fmt.Errorf("sdfs: %s: block size %d outside (0, %d]", m.Name, m.BlockSize, cfg.MaxBlockSize)
	}
	want := (m.Size + int64(m.BlockSize) - 1) / int64(m.BlockSize)
	if int64(len(m.Sums)) != want {
		return fmt.Errorf("sdfs: %s: %d blocks for %d bytes of %d-byte blocks", m.Name, len(m.Sums), m.Size, m.BlockSize)
	}
	for _, s := range m.Sums {
		if len(s) != 64 || !isHex(s) {
			return fmt.Errorf("sdfs: %s: bad block checksum %q", m.Name, s)
		}
	}
	return nil
}

// decodeManifest parses and validates a manifest.
func decodeManifest(b []byte, cfg Config) (*Manifest, error) {
	m := &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("sdfs: decode manifest: %w", err)
	}
	if err := m.Validate(cfg); err != nil {
		return nil, err
	}
	return m, nil
}

func sumHex(sum [32]byte) string { return hex.EncodeToString(sum[:]) }

func jsonMarshal(m *Manifest) ([]byte, error) { return json.Marshal(m) }
