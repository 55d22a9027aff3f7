package sdfs

// Design
//
// Placement. A name's replicas are the first Replicas (4) live nodes in its rendezvous
// order (Rank): every node ranks the nodes by SHA-256(name, node name) and takes the top.
// Node names are stable across restarts, so a restarted node is again a replica of the
// names it held.
//
// Versions. Every put writes a new version (Seq, Writer). The writer reads the newest
// version from a read quorum and takes Seq+1, with a random 64-bit Writer; versions are
// ordered by Seq then Writer, so two concurrent puts of one name get distinct versions
// and every replica agrees on which is newest. A delete writes a tombstone version.
// Each node keeps the newest MaxVersions data versions and the newest tombstone.
//
// Writes (W = N). A put streams the file in blocks of BlockSize bytes; each block goes to
// every replica of the set, which checks its SHA-256 and fsyncs it into a staging
// directory. When all blocks are everywhere, the writer sends the manifest (name,
// version, size, block sums) to every replica, which checks it against the staged blocks,
// fsyncs it and renames the staging directory into the store: only then is the version
// visible there. The put returns success only after every replica committed, so an
// acknowledged version is on the disks of 4 nodes and survives any 3 crashes. A put's
// commit is pending: the version is installed but invisible until the writer, once every
// replica committed, sends "sdfs.confirm" to all of them (fsynced there too); only then
// does the put return. If a replica fails, the write is aborted (staging discarded, and
// the version dropped where it was already committed or confirmed) and, when the source
// can be re-read, retried with the failed nodes replaced by the next ones in the
// rendezvous order. Files up to 64 KiB (and tombstones) skip the separate staging phase:
// one "sdfs.write" call per replica carries the manifest and the bytes, and the replica
// stages, fsyncs and commits them (pending) in one step; the confirm follows as above. A
// replica that crashed holding a pending version drops it when it restarts (and a live
// one after TxnIdle without a confirm), so a put that failed before every replica
// committed cannot leave its version behind, even on a replica that crashed holding it
// (TestFailedPutDoesNotReappearAfterReplicaCrash). One window remains: when a confirm
// fails (a replica died between its commit and its confirm), the writer drops the version
// where it was confirmed, but a replica that confirmed and crashed before that drop reached
// it still holds it, visible, when it restarts, and repair copies it like any other. The
// put's error leaves its outcome open in that case, as for any write whose answer was
// lost. Repair copies (already acknowledged versions) commit directly.
//
// Immutable puts (Client.PutImmutable: a task's result, whose bytes every run of the task
// computes the same) skip the version query and the pending phase: the version comes from
// the bytes (sequence 1, writer = the first 8 bytes of their SHA-256), so any write of them
// is the same version, a replica holding it accepts it again, and what a failed write
// leaves behind is the right bytes. One "sdfs.write" per replica commits it visible, not
// fsynced when the caller asks (the results: durable by their replicas, as the scheduler's
// journal is by its standby). An unsynced write of one block is appended to the node's
// volume (see volume.go: an append-only log of such versions, like Haystack's needles)
// instead of becoming a version directory: a replica creates no inode for it, where a
// staged directory created four (a staging directory, two files, a name directory). On
// this machine's ext4 that took a task's result write from 0.2-1.9 ms per replica (slower
// after many deletions) to ~0.01 ms (BenchmarkDiskSmallWrite).
//
// Reads (R = ReadQuorum, W+R > N). A read asks the first 2N nodes of the rendezvous
// order for their versions (where copies may still sit after membership changes; if none
// has the name, everyone else), needs R answers, takes the newest version reported, and
// streams its blocks from the nodes holding it, Pipeline blocks ahead. Each block is
// checked against the manifest's sum by the node before sending and by the client after
// receiving; a failing block is taken from the next holder, and the node that found it
// corrupt repairs it from another replica. Memory stays bounded by Pipeline blocks per
// transfer, whatever the file size.
//
// Repair. Each node scans what it holds every RepairInterval and soon after membership
// changes. A name found fully replicated is skipped while the live peers and the node's
// versions of it stay the same, but rechecked once every FullScanEvery scans. For every version it holds, the first node in the name's rendezvous order that
// holds it copies it to the replica-set members lacking it (two-phase, as a put). A node
// no longer in a name's replica set drops its copy once every member of the set holds all
// its versions. A copy is a move when nodes only joined since the scan that found the
// name fully replicated (all its copies are still live, in a set that changed), else a
// repair: repairs all go at once, moves RebalanceMoves a scan, so a rejoin does not draw
// thousands of task results onto the new nodes at once. Readers find a version not moved
// yet on the nodes past its set (they ask twice the replica set). A scrub reads every
// block every ScrubInterval and repairs bad ones.
//
// Disk. Everything lives under DATA_DIR/sdfs (see disk). User names never become paths.
// The index is rebuilt from the committed manifests and the volume's records at start (a
// record cut short by a crash is cut off); staging is wiped.
