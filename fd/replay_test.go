package fd

import (
	"encoding/binary"
	"errors"
	"testing"
)

// TestCodecRefusesReplays: an authentic packet opens once; a copy, a packet from an
// earlier life of its sender, or one older than the window is refused; packets reordered
// within the window, and a sender's new life, are accepted.
func TestCodecRefusesReplays(t *testing.T) {
	sender := NewCodecSession([]byte("k"), 100)
	recv := NewCodecSession([]byte("k"), 1)
	p1, p2, p3 := sender.Encode(sampleMessage()), sender.Encode(sampleMessage()), sender.Encode(sampleMessage())
	for i, tc := range []struct {
		pkt  []byte
		want error
	}{
		{p1, nil}, {p1, ErrReplay}, // a copy of the same packet
		{p3, nil}, {p2, nil}, // reordered within the window
		{p2, ErrReplay}, {p3, ErrReplay},
	} {
		if _, err := recv.Decode(tc.pkt); !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
			t.Fatalf("step %d: got %v, want %v", i, err, tc.want)
		}
	}
	// Far behind the newest packet: refused even though never seen.
	old := sender.Encode(sampleMessage())
	for i := 0; i < replayBits; i++ {
		if _, err := recv.Decode(sender.Encode(sampleMessage())); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := recv.Decode(old); !errors.Is(err, ErrReplay) {
		t.Fatalf("packet %d behind the newest: %v, want a replay", replayBits, err)
	}
	// The sender restarts (a larger session): accepted, and its old life is refused from then on.
	reborn := NewCodecSession([]byte("k"), 200)
	if _, err := recv.Decode(reborn.Encode(sampleMessage())); err != nil {
		t.Fatalf("new life: %v", err)
	}
	if _, err := recv.Decode(sender.Encode(sampleMessage())); !errors.Is(err, ErrReplay) {
		t.Fatalf("earlier life after the restart: %v, want a replay", err)
	}
	// Other senders have windows of their own.
	m := sampleMessage()
	m.From.Addr = "127.0.0.1:9999"
	if _, err := recv.Decode(sender.Encode(m)); err != nil {
		t.Fatalf("another sender: %v", err)
	}
}

// TestReplayWindowBoundsSenders: the window remembers at most replayMaxSenders senders,
// forgetting the least recently heard.
func TestReplayWindowBoundsSenders(t *testing.T) {
	var w replayWindow
	for i := 0; i < replayMaxSenders+10; i++ {
		if !w.accept(string(binary.AppendUvarint(nil, uint64(i))), 1, 1) {
			t.Fatal("first packet of a sender refused")
		}
	}
	if len(w.senders) != replayMaxSenders {
		t.Fatalf("%d senders remembered", len(w.senders))
	}
	if _, ok := w.senders[string(binary.AppendUvarint(nil, 0))]; ok {
		t.Fatal("the least recently heard sender was kept")
	}
}

// TestDetectorCountsReplays: a packet captured off the wire and sent again is dropped and
// counted, and does not reach the membership.
func TestDetectorCountsReplays(t *testing.T) {
	net := NewMemNetwork(1)
	cfg := DefaultConfig()
	cfg.Name, cfg.Addr, cfg.Secret = "a", "a:1", []byte("k")
	ep, err := net.Listen("a:1", 16)
	if err != nil {
		t.Fatal(err)
	}
	d, err := StartOn(cfg, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	c := NewCodecSession([]byte("k"), 5)
	m := &Message{Kind: MsgGossip, From: Member{Name: "b", Addr: "b:1", Incarnation: 1, State: Alive}}
	pkt := c.Encode(m)
	d.receive(Packet{From: "b:1", Data: pkt})
	d.receive(Packet{From: "b:1", Data: pkt})
	if st := d.Stats(); st.DroppedReplay != 1 {
		t.Fatalf("stats %+v: want 1 replay dropped", st)
	}
}

// FuzzReplayWindow runs arbitrary sequences of (session, seq) through the window and checks
// its promises: a (session, seq) is never accepted twice, nothing older than the newest
// session is accepted, and a packet newer than any before it always is.
func FuzzReplayWindow(f *testing.F) {
	f.Add([]byte{1, 1, 1, 1, 1, 2, 1, 1})
	f.Add([]byte{2, 5, 1, 9, 2, 5, 2, 200, 2, 6})
	f.Add([]byte{1, 255, 1, 0, 3, 0, 2, 7, 3, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var w replayWindow
		seen := map[[2]uint64]bool{}
		var newest, top uint64
		for i := 0; i+1 < len(ops); i += 2 {
			session := uint64(ops[i] % 4)
			seq := uint64(ops[i+1]) * 9 // spans several windows' worth of 1024 over 255 steps
			ok := w.accept("s", session, seq)
			key := [2]uint64{session, seq}
			if ok && (seen[key] || session < newest) {
				t.Fatalf("accepted session %d seq %d again or after session %d", session, seq, newest)
			}
			fresh := len(seen) == 0 || session > newest || (session == newest && seq > top)
			if fresh && !ok {
				t.Fatalf("refused a fresh packet: session %d seq %d (newest %d, top %d)", session, seq, newest, top)
			}
			if ok {
				seen[key] = true
				if session > newest || len(seen) == 1 {
					newest, top = session, seq
				} else if seq > top {
					top = seq
				}
			}
		}
	})
}
