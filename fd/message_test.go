package fd

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func sampleMessage() *Message {
	return &Message{Kind: MsgHeartbeat,
		From: Member{Name: "node1", Addr: "127.0.0.1:9000", RPCAddr: "127.0.0.1:9001", HTTPAddr: "127.0.0.1:9002", Incarnation: 1 << 50, State: Alive},
		Updates: []Member{{Name: "node2", Addr: "127.0.0.1:9010", Incarnation: 7, State: Suspect},
			{Name: "node3", Addr: "127.0.0.1:9020", Incarnation: 9, State: Left}}}
}

func sampleSync() *Message {
	return &Message{Kind: MsgSync, From: sampleMessage().From, Digest: []uint32{0, 1, 0xdeadbeef, 1 << 31}}
}

func TestCodecRoundTripAndSize(t *testing.T) {
	c := NewCodec([]byte("secret"))
	for _, m := range []*Message{sampleMessage(), sampleSync()} {
		p := c.Encode(m)
		if len(p) != EncodedSize(m) {
			t.Fatalf("%v: EncodedSize %d, packet %d", m.Kind, EncodedSize(m), len(p))
		}
		got, err := c.Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("got %+v want %+v", got, m)
		}
	}
}

// TestCodecDigestOnlyOnSync: the digest is part of a sync's body only; other kinds neither
// send nor accept one.
func TestCodecDigestOnlyOnSync(t *testing.T) {
	c := NewCodec([]byte("secret"))
	m := sampleMessage()
	m.Digest = []uint32{7}
	got, err := c.Decode(c.Encode(m))
	if err != nil || got.Digest != nil {
		t.Fatalf("heartbeat with a digest: %v, decoded digest %v", err, got.Digest)
	}
	body := appendBody(nil, sampleSync())
	body[0] = byte(MsgHeartbeat) // a heartbeat followed by a digest has trailing bytes
	if _, err := c.Decode(c.seal(body)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("heartbeat body with a digest accepted: %v", err)
	}
}

// TestCodecRejectsBadDigests: a sync's digest is bounded and must be exactly as long as it says.
func TestCodecRejectsBadDigests(t *testing.T) {
	c := NewCodec([]byte("secret"))
	prefix := appendBody(nil, &Message{Kind: MsgSync, From: sampleMessage().From}) // ends with digest count 0
	prefix = prefix[:len(prefix)-1]
	withCount := func(n uint64, words int) []byte {
		b := binary.AppendUvarint(append([]byte(nil), prefix...), n)
		return append(b, make([]byte, 4*words)...)
	}
	full := appendBody(nil, sampleSync())
	cases := map[string][]byte{
		"no digest":       prefix,
		"empty digest":    withCount(0, 0),
		"too long":        withCount(maxDigest+1, maxDigest+1),
		"huge count":      withCount(1<<62, 4),
		"short by a word": withCount(4, 3),
		"cut mid-word":    full[:len(full)-1],
		"trailing bytes":  append(withCount(2, 2), 0),
	}
	for name, body := range cases {
		if _, err := c.Decode(c.seal(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	if m, err := c.Decode(c.seal(withCount(maxDigest, maxDigest))); err != nil || len(m.Digest) != maxDigest {
		t.Fatalf("largest digest: %v", err)
	}
}

func TestCodecRejects(t *testing.T) {
	c := NewCodec([]byte("secret"))
	p := c.Encode(sampleMessage())
	flip := func(i int) []byte { q := append([]byte(nil), p...); q[i] ^= 1; return q }
	cases := []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"truncated", p[:20], ErrMalformed},
		{"bad magic", flip(0), ErrMalformed},
		{"other cluster", NewCodec([]byte("other")).Encode(sampleMessage()), ErrOtherCluster},
		{"tampered body", flip(20), ErrBadMAC},
		{"tampered mac", flip(len(p) - 1), ErrBadMAC},
		{"cut mac", p[:len(p)-1], ErrBadMAC},
	}
	for _, tc := range cases {
		if _, err := c.Decode(tc.pkt); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v want %v", tc.name, err, tc.want)
		}
	}
}

// TestCodecRejectsAuthenticatedGarbage: a peer holding the secret still cannot crash us
// with a malformed body.
func TestCodecRejectsAuthenticatedGarbage(t *testing.T) {
	c := NewCodec([]byte("secret"))
	for _, body := range [][]byte{{0}, {9}, {1, 0xff}, {1, 200, 1}, append([]byte{1}, make([]byte, 40)...)} {
		if _, err := c.Decode(c.seal(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("body %x: got %v", body, err)
		}
	}
}

// FuzzDecode feeds arbitrary packets (raw, and sealed with the right key so the body parser
// is reached) to the decoder: it must never panic, and what it accepts must re-encode to
// an equivalent message.
func FuzzDecode(f *testing.F) {
	c := NewCodec([]byte("fuzz"))
	p := c.Encode(sampleMessage())
	f.Add(p, false)
	f.Add(p[magicLen+tagLen:len(p)-macLen], true)
	f.Add(appendBody(nil, sampleSync()), true)
	f.Add(appendBody(nil, &Message{Kind: MsgSyncAck, From: sampleMessage().From, Updates: sampleMessage().Updates}), true)
	f.Add([]byte{}, true)
	// Extreme sessions and packet numbers (the replay window must take them).
	f.Add(c.sealAs(^uint64(0), ^uint64(0), appendBody(nil, sampleMessage())), false)
	f.Add(c.sealAs(0, 0, appendBody(nil, sampleMessage())), false)
	f.Fuzz(func(t *testing.T, b []byte, seal bool) {
		if seal {
			b = c.seal(b)
		}
		m, err := c.Decode(b)
		if err != nil {
			return
		}
		// A fresh receiver: c's window may have seen a later session of the sender.
		again, err := NewCodec([]byte("fuzz")).Decode(c.Encode(m))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-encode of accepted packet: %v", err)
		}
	})
}

func TestJoinAnswerSplitsIntoPackets(t *testing.T) {
	s := NewSim(SimConfig{N: 200, Seed: 1, Bootstrap: true})
	m := s.Nodes[0].M
	m.answerJoin("x:1")
	out, _ := m.Ready()
	got := 0
	c := NewCodec([]byte("k"))
	for _, e := range out {
		if n := len(c.Encode(&e.Msg)); n > MaxPacket {
			t.Fatalf("packet of %d bytes", n)
		}
		got += len(e.Msg.Updates)
	}
	if got != 200 || len(out) < 2 {
		t.Fatalf("%d members in %d packets", got, len(out))
	}
}
