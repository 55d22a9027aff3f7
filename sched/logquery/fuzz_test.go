package logquery

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"idunno/rpc"
)

// FuzzScan feeds arbitrary log bytes through the search and the reply's encode/decode: every
// line returned matches, is at most MaxLineBytes, and survives the round trip.
func FuzzScan(f *testing.F) {
	f.Add([]byte("a task\nb\r\nc task"), "task")
	f.Add([]byte("\n\n\x00\xff"), "^$")
	f.Fuzz(func(t *testing.T, log []byte, pattern string) {
		re, err := Compile(pattern)
		if err != nil {
			return
		}
		res, err := scan(context.Background(), bytes.NewReader(log), re, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range res.Lines {
			if !re.MatchString(l) || len(l) > MaxLineBytes || strings.ContainsRune(l, '\n') {
				t.Fatalf("bad line %q", l)
			}
		}
		m, err := encode(res)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decode(m)
		if err != nil {
			t.Fatal(err)
		}
		if back.Count != res.Count || strings.Join(back.Lines, "\n") != strings.Join(res.Lines, "\n") {
			t.Fatalf("round trip: %q -> %q", res.Lines, back.Lines)
		}
	})
}

// FuzzReply decodes arbitrary replies: errors, never panics.
func FuzzReply(f *testing.F) {
	f.Add([]byte(`{"node":"node0","count":2}`), []byte("a\nb\n"))
	f.Fuzz(func(t *testing.T, args, body []byte) {
		decode(&rpc.Message{Args: args, Body: body})
	})
}
