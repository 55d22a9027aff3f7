package train

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Plan fixes what every step of a run computes: the samples of each step and shard.
type Plan struct {
	Samples int    // training samples in the dataset
	Batch   int    // global batch; an epoch's last step takes the remainder
	Shards  int    // shards per step (1 or more)
	Epochs  int    // epochs
	Seed    uint64 // the epoch orders and dropout masks derive from it
}

// Check validates the plan.
func (p Plan) Check() error {
	switch {
	case p.Samples < 1:
		return fmt.Errorf("train: the dataset is empty")
	case p.Batch < 1:
		return fmt.Errorf("train: batch %d must be at least 1", p.Batch)
	case p.Batch > p.Samples:
		return fmt.Errorf("train: batch %d is larger than the dataset (%d samples)", p.Batch, p.Samples)
	case p.Shards < 1 || p.Shards > p.Batch:
		return fmt.Errorf("train: %d shards for a batch of %d (want 1 to the batch)", p.Shards, p.Batch)
	case p.Epochs < 1 || p.Epochs > 100000:
		return fmt.Errorf("train: %d epochs (want 1 to 100000)", p.Epochs)
	}
	return nil
}

// StepsPerEpoch counts the steps of one epoch (the last one may be short).
func (p Plan) StepsPerEpoch() int { return (p.Samples + p.Batch - 1) / p.Batch }

// TotalSteps counts every step of the run.
func (p Plan) TotalSteps() int { return p.StepsPerEpoch() * p.Epochs }

// pcg is PCG-XSL-RR 128/64 (the generator of Go's math/rand/v2 PCG), written out so
// that an epoch's order can never change with the Go version.
type pcg struct{ hi, lo uint64 }

func (r *pcg) next() uint64 {
	const (
		mulHi = 2549297995355413924
		mulLo = 4865540595714422341
		incHi = 6364136223846793005
		incLo = 1442695040888963407
	)
	hi, lo := bits.Mul64(r.lo, mulLo)
	hi += r.hi*mulLo + r.lo*mulHi
	lo, c := bits.Add64(lo, incLo, 0)
	hi, _ = bits.Add64(hi, incHi, c)
	r.lo, r.hi = lo, hi
	const cheapMul = 0xda942042e4dd58b5
	hi ^= hi >> 32
	hi *= cheapMul
	hi ^= hi >> (32 + 16)
	hi *= lo | 1
	return hi
}

// below returns a uniform value in [0, n) (Lemire's method with rejection).
func (r *pcg) below(n uint64) uint64 {
	hi, lo := bits.Mul64(r.next(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.next(), n)
		}
	}
	return hi
}

// Order is epoch e's sample order: a Fisher-Yates shuffle of 0..Samples-1 seeded by (Seed, e).
func (p Plan) Order(epoch int) []int {
	r := &pcg{hi: p.Seed, lo: uint64(epoch)*0x9e3779b97f4a7c15 + 1}
	ord := make([]int, p.Samples)
	for i := range ord {
		ord[i] = i
	}
	for i := len(ord) - 1; i > 0; i-- {
		j := int(r.below(uint64(i + 1)))
		ord[i], ord[j] = ord[j], ord[i]
	}
	return ord
}

// Step locates global step s (from 0): its epoch and its range [from, to) in that epoch's order.
func (p Plan) Step(s int) (epoch, from, to int) {
	spe := p.StepsPerEpoch()
	epoch = s / spe
	from = (s % spe) * p.Batch
	to = min(from+p.Batch, p.Samples)
	return epoch, from, to
}

// ShardRange cuts a step's [from, to) into Shards nearly equal parts (the first ones one
// larger when it does not divide) and returns shard k's range. A shard may be empty only
// when the step has fewer samples than shards.
func (p Plan) ShardRange(from, to, k int) (int, int) {
	n := to - from
	base, extra := n/p.Shards, n%p.Shards
	start := from + k*base + min(k, extra)
	size := base
	if k < extra {
		size++
	}
	return start, start + size
}

// ShardSeed is the seed of step s, shard k's dropout masks.
func (p Plan) ShardSeed(s, k int) uint64 {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[:], p.Seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(s))
	binary.LittleEndian.PutUint64(b[16:], uint64(k))
	h := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(h[:8])
}
