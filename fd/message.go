package fd

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// MsgKind says what a packet is for.
type MsgKind uint8

// Packet kinds.
const (
	MsgHeartbeat MsgKind = iota + 1 // periodic, to ring successors; carries piggybacked updates
	MsgGossip                       // eager push of fresh updates, or a direct correction
	MsgJoin                         // a node asking an introducer to let it in
	MsgJoinAck                      // an introducer's answer: (part of) its membership list
	MsgSync                         // anti-entropy: a digest of the sender's view, asking for what differs
	MsgSyncAck                      // the answer to a sync: (part of) the records in the buckets that differ
	maxKind      = MsgSyncAck
)

// Message is one decoded packet. From is the sender's own record; Updates are member
// records being disseminated. Digest is carried by MsgSync only (see Membership.digest).
type Message struct {
	Kind    MsgKind
	From    Member
	Updates []Member
	Digest  []uint32
}

// Wire format, all integers unsigned varints:
//
//	packet  = magic(4) tag(8) session(8) seq(8) body mac(32)   (session, seq: big-endian)
//	body    = kind(1) member count member* [digest]
//	member  = str(name) str(addr) str(rpc) str(http) incarnation state(1)
//	str     = len bytes            (len <= maxString)
//	digest  = count uint32be*      (kind sync only, 1 <= count <= maxDigest)
//
// tag identifies the cluster (derived from the secret), mac is HMAC-SHA256(secret, magic tag
// session seq body). session identifies the sending codec's life (the node's starting
// incarnation: larger after every restart) and seq counts its packets, so a receiver can
// refuse a packet it has seen, or one from an earlier life (see replayWindow).
const (
	magicLen   = 4
	tagLen     = 8
	seqLen     = 16 // session and seq
	macLen     = sha256.Size
	maxString  = 255
	maxUpdates = 1024
	maxDigest  = 256
	// MaxPacket bounds one packet; encoders split larger member lists.
	MaxPacket = 1400
)

var magic = [magicLen]byte{'I', 'D', 'F', '2'}

// Reasons a packet is dropped.
var (
	ErrMalformed    = errors.New("fd: malformed packet")
	ErrOtherCluster = errors.New("fd: packet from another cluster")
	ErrBadMAC       = errors.New("fd: packet failed authentication")
	ErrReplay       = errors.New("fd: replayed or stale packet")
)

// Codec seals and opens packets for one cluster secret. It numbers the packets it seals,
// and remembers, per sender, which numbers it has opened (a replay window), so a captured
// packet sent again is refused. Safe for concurrent use.
type Codec struct {
	secret  []byte
	tag     [tagLen]byte
	session uint64
	seq     atomic.Uint64
	replay  replayWindow
}

// NewCodec returns a codec keyed by secret whose session is the current time in
// microseconds (as a node's first incarnation).
func NewCodec(secret []byte) *Codec {
	return NewCodecSession(secret, uint64(time.Now().UnixMicro()))
}

// NewCodecSession returns a codec keyed by secret that seals packets under session, which
// must be larger than any session an earlier life of the same member used: receivers
// refuse packets of a session older than the newest they have seen from that member.
func NewCodecSession(secret []byte, session uint64) *Codec {
	c := &Codec{secret: append([]byte(nil), secret...), session: session}
	sum := sha256.Sum256(append([]byte("idunno fd cluster tag\x00"), secret...))
	copy(c.tag[:], sum[:])
	return c
}

// Encode returns the sealed packet for m.
func (c *Codec) Encode(m *Message) []byte {
	return c.seal(appendBody(make([]byte, 0, 128+64*len(m.Updates)), m))
}

// seal frames, numbers and authenticates a body.
func (c *Codec) seal(body []byte) []byte {
	return c.sealAs(c.session, c.seq.Add(1), body)
}

func (c *Codec) sealAs(session, seq uint64, body []byte) []byte {
	b := make([]byte, 0, magicLen+tagLen+seqLen+len(body)+macLen)
	b = append(b, magic[:]...)
	b = append(b, c.tag[:]...)
	b = binary.BigEndian.AppendUint64(b, session)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, body...)
	h := hmac.New(sha256.New, c.secret)
	h.Write(b)
	return h.Sum(b)
}

// Decode authenticates and parses a packet, and refuses one whose (session, seq) it has
// already opened for the same sender, or that is older than its window. Errors wrap
// ErrMalformed, ErrOtherCluster, ErrBadMAC or ErrReplay.
func (c *Codec) Decode(p []byte) (*Message, error) {
	if len(p) < magicLen+tagLen+seqLen+macLen+1 || [magicLen]byte(p[:magicLen]) != magic {
		return nil, ErrMalformed
	}
	if [tagLen]byte(p[magicLen:magicLen+tagLen]) != c.tag {
		return nil, ErrOtherCluster
	}
	n := len(p) - macLen
	h := hmac.New(sha256.New, c.secret)
	h.Write(p[:n])
	if !hmac.Equal(h.Sum(nil), p[n:]) {
		return nil, ErrBadMAC
	}
	hdr := p[magicLen+tagLen:]
	session, seq := binary.BigEndian.Uint64(hdr), binary.BigEndian.Uint64(hdr[8:])
	m, err := decodeBody(p[magicLen+tagLen+seqLen : n])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !c.replay.accept(m.From.Addr, session, seq) {
		return nil, fmt.Errorf("%w: %s session %d packet %d", ErrReplay, m.From.Addr, session, seq)
	}
	return m, nil
}

// EncodedSize is the length of m's sealed packet.
func EncodedSize(m *Message) int {
	n := magicLen + tagLen + seqLen + macLen + 1 + memberSize(m.From) + uvarintLen(uint64(len(m.Updates)))
	for _, u := range m.Updates {
		n += memberSize(u)
	}
	if m.Kind == MsgSync {
		n += uvarintLen(uint64(len(m.Digest))) + 4*len(m.Digest)
	}
	return n
}

func appendBody(b []byte, m *Message) []byte {
	b = append(b, byte(m.Kind))
	b = appendMember(b, m.From)
	b = binary.AppendUvarint(b, uint64(len(m.Updates)))
	for _, u := range m.Updates {
		b = appendMember(b, u)
	}
	if m.Kind == MsgSync {
		b = binary.AppendUvarint(b, uint64(len(m.Digest)))
		for _, h := range m.Digest {
			b = binary.BigEndian.AppendUint32(b, h)
		}
	}
	return b
}

func appendMember(b []byte, m Member) []byte {
	for _, s := range []string{m.Name, m.Addr, m.RPCAddr, m.HTTPAddr} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, m.Incarnation)
	return append(b, byte(m.State))
}

func memberSize(m Member) int {
	n := 1 + uvarintLen(m.Incarnation)
	for _, s := range []string{m.Name, m.Addr, m.RPCAddr, m.HTTPAddr} {
		n += uvarintLen(uint64(len(s))) + len(s)
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// reader decodes a body; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = errors.New(msg)
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte1() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > maxString || n > uint64(len(r.b)) {
		r.fail("bad string length")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) member() Member {
	m := Member{Name: r.str(), Addr: r.str(), RPCAddr: r.str(), HTTPAddr: r.str(), Incarnation: r.uvarint()}
	st := r.byte1()
	if st > byte(Left) {
		r.fail("bad state")
	}
	m.State = State(st)
	if r.err == nil && m.Addr == "" {
		r.fail("empty address")
	}
	return m
}

func (r *reader) digest() []uint32 {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n == 0 || n > maxDigest || n*4 > uint64(len(r.b)) {
		r.fail("bad digest length")
		return nil
	}
	d := make([]uint32, n)
	for i := range d {
		d[i] = binary.BigEndian.Uint32(r.b[4*i:])
	}
	r.b = r.b[4*n:]
	return d
}

func decodeBody(b []byte) (*Message, error) {
	r := &reader{b: b}
	k := MsgKind(r.byte1())
	if r.err == nil && (k == 0 || k > maxKind) {
		return nil, fmt.Errorf("unknown kind %d", k)
	}
	m := &Message{Kind: k, From: r.member()}
	n := r.uvarint()
	if n > maxUpdates || n > uint64(len(r.b)) {
		r.fail("too many updates")
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		m.Updates = append(m.Updates, r.member())
	}
	if k == MsgSync {
		m.Digest = r.digest()
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}
