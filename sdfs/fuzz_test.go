package sdfs

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"sort"
	"testing"

	"idunno/rpc"
)

// FuzzHandlers feeds arbitrary arguments and bodies to every RPC method of one store and
// checks that nothing panics and nothing is written outside the store's directory.
func FuzzHandlers(f *testing.F) {
	dir := f.TempDir()
	st, err := New(testConfig(), dir, Peer{Name: "self", Addr: "127.0.0.1:1"}, newFakeMembers(), rpc.NewClient([]byte("x")))
	if err != nil {
		f.Fatal(err)
	}
	st.Logf = func(string, ...any) {}
	hs := st.handlers()
	var methods []string
	for m := range hs {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	index := map[string]uint8{}
	for i, m := range methods {
		index[m] = uint8(i)
	}
	js := func(v any) []byte { b, _ := json.Marshal(v); return b }
	txn := "0123456789abcdef0123456789abcdef"
	ver := Version{Seq: 1, Writer: "0123456789abcdef"}
	body := []byte("hello")
	sum := sumHex(sha256.Sum256(body))
	f.Add(index["sdfs.begin"], js(beginArgs{Txn: txn, Name: "a/b", Version: ver}), []byte(nil))
	f.Add(index["sdfs.putblock"], js(blockArgs{Txn: txn, Index: 0, Sum: sum}), body)
	f.Add(index["sdfs.commit"], js(commitArgs{Txn: txn, Manifest: Manifest{Name: "a/b", Version: ver, Size: 5, BlockSize: 1024, Sums: []string{sum}}}), []byte(nil))
	f.Add(index["sdfs.getblock"], js(versionArgs{Name: "a/b", Version: ver, Index: 0}), []byte(nil))
	f.Add(index["sdfs.begin"], []byte(`{"txn":"../../../../tmp/x","name":"../../etc","version":{"seq":1,"writer":"../.."}}`), []byte(nil))
	f.Add(index["sdfs.stat"], []byte(`{"names":["a/b","../x"]}`), []byte(nil))
	f.Fuzz(func(t *testing.T, m uint8, args, body []byte) {
		method := methods[int(m)%len(methods)]
		if method == "sdfs.verify" {
			return
		}
		hs[method](context.Background(), &rpc.Message{Method: method, Args: args, Body: body})
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 1 || ents[0].Name() != "sdfs" {
			t.Fatalf("store wrote outside its directory: %v", ents)
		}
	})
}

// FuzzVolumeRecords: replaying any bytes as a volume never panics, reports a prefix of
// them, and hands out only records inside it; records appended to that prefix replay
// after it.
func FuzzVolumeRecords(f *testing.F) {
	good := func(kind byte, m, b string) []byte {
		v := &volume{dir: f.TempDir(), maxSize: 1 << 20, files: map[int]*os.File{}}
		if err := v.startFile(1); err != nil {
			f.Fatal(err)
		}
		defer v.close()
		if _, err := v.appendRecord(kind, []byte(m), []byte(b)); err != nil {
			f.Fatal(err)
		}
		out, _ := os.ReadFile(v.path(1))
		return out
	}
	f.Add(good(recPut, `{"name":"a"}`, "body"))
	f.Add(append(good(recDrop, `{"name":"a"}`, ""), "SDV1P\x01"...))
	f.Add([]byte("SDV1P\xff\xff\xff\xff\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := parseRecords(b, func(kind byte, m []byte, off int64, bl int) {
			if off < 0 || off+int64(bl)+4 > int64(len(b)) {
				t.Fatalf("record body at %d+%d outside %d bytes", off, bl, len(b))
			}
		})
		if n < 0 || n > int64(len(b)) {
			t.Fatalf("prefix %d of %d bytes", n, len(b))
		}
		v := &volume{dir: t.TempDir(), maxSize: 1 << 20, files: map[int]*os.File{}}
		if err := v.startFile(1); err != nil {
			t.Fatal(err)
		}
		defer v.close()
		v.files[1].Write(b[:n])
		v.size = n
		loc, err := v.appendRecord(recPut, []byte("m"), []byte("tail"))
		if err != nil {
			t.Fatal(err)
		}
		all, _ := os.ReadFile(v.path(1))
		var last volLoc
		if got := parseRecords(all, func(_ byte, _ []byte, off int64, bl int) { last = volLoc{1, off, bl} }); got != int64(len(all)) || last != loc {
			t.Fatalf("after appending: prefix %d of %d, last record %+v, want %+v", got, len(all), last, loc)
		}
	})
}
