// Package sdfs is IDunno's replicated file store: files split into checksummed blocks,
// replicated on 4 live nodes chosen by rendezvous hashing, versioned, written with two-phase
// commit and repaired in the background. See doc.go for the design.
package sdfs

import "time"

// Config gathers every knob of the store. DefaultConfig documents the defaults.
type Config struct {
	Replicas       int           // replication factor N (and write quorum W: every replica of the set)
	ReadQuorum     int           // R: replicas that must answer a read's version query (W+R > N)
	BlockSize      int           // bytes per block a client writes
	MaxBlockSize   int           // largest block a node accepts (bounded by rpc.MaxBody)
	MaxFileSize    int64         // largest file a node accepts
	MaxVersions    int           // data versions kept per name; older ones are pruned
	MaxTxns        int           // concurrent uncommitted writes a node accepts
	TxnIdle        time.Duration // an uncommitted write idle this long is discarded
	StatTimeout    time.Duration // deadline of a metadata call
	BlockTimeout   time.Duration // deadline of one block transfer
	Pipeline       int           // blocks in flight during one put or get
	RepairInterval time.Duration // period of the background re-replication scan
	RepairDebounce time.Duration // delay after a membership change before a scan
	RepairPushes   int           // versions one node pushes to others at once
	RebalanceMoves int           // versions already held by Replicas live nodes one scan moves to their new set (0: no bound)
	ScanNames      int           // names one repair scan checks at most, those that lost a replica first (0: no bound)
	ScrubInterval  time.Duration // period of the background checksum scrub; 0 disables it
}

// DefaultConfig returns the store's defaults.
func DefaultConfig() Config {
	return Config{
		Replicas:       4,
		ReadQuorum:     2,
		BlockSize:      4 << 20,
		MaxBlockSize:   16 << 20,
		MaxFileSize:    16 << 30,
		MaxVersions:    5,
		MaxTxns:        64,
		TxnIdle:        2 * time.Minute,
		StatTimeout:    5 * time.Second,
		BlockTimeout:   60 * time.Second,
		Pipeline:       3,
		RepairInterval: 3 * time.Second,
		RepairDebounce: 300 * time.Millisecond,
		RepairPushes:   2,
		RebalanceMoves: 128,
		ScanNames:      1024,
		ScrubInterval:  10 * time.Minute,
	}
}
