package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idunno/sched/logquery"
)

func TestFields(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		format string
		args   []any
		want   map[string]any
	}{
		{"sched: job %s removed", []any{"j1"}, map[string]any{"job": "j1"}},
		{"sched: worker %s starting task %s/%d (queries %d-%d)", []any{"node4", "b", 3, 10, 19},
			map[string]any{"worker": "node4", "job": "b", "task": 3}},
		{"sched: completed task %s/%d on %s (%d queries, %.1f ms); job %d/%d tasks", []any{"b", 4, "node5", 8, 1.5, 5, 9},
			map[string]any{"job": "b", "task": 4}},
		{"sched: training job %s: step %d shard %d: sending: %v", []any{"t", 7, 2, boom},
			map[string]any{"job": "t", "step": 7, "shard": 2, "err": "boom"}},
		{"sched: became coordinator, epoch %d (%s); %d jobs in the journal", []any{3, "why", 2}, map[string]any{"epoch": 3}},
		{"sched: following coordinator %s (epoch %d)", []any{"node0", 4}, map[string]any{"coordinator": "node0", "epoch": 4}},
		{"100%% done: job %s", []any{"x"}, map[string]any{"job": "x"}},
		{"%s (%s) failed (incarnation %d)", []any{"node7", "127.0.0.1:7070", 5}, map[string]any{}},
		{"job %s", nil, map[string]any{}}, // a missing argument is no field
	} {
		got := map[string]any{}
		for _, a := range Fields(c.format, c.args) {
			got[a.Key] = a.Value.Any()
		}
		want := map[string]any{}
		for k, v := range c.want {
			want[k] = slog.AnyValue(v).Any()
		}
		if !cmp.Equal(got, want) {
			t.Errorf("Fields(%q) = %v, want %v", c.format, got, want)
		}
	}
}

func TestTextKeepsTheLineLayout(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "node3", Text, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	Printf(l, "fd")("%s (%s) failed (incarnation %d)", "node7", "127.0.0.1:7070", 5)
	Printf(l, "sched")("sched: task %s/%d failed: %v", "b", 2, errors.New("no kernel\nat all"))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", buf.String())
	}
	f := strings.Fields(lines[0])
	if _, err := time.Parse(timeLayout, f[0]); err != nil || f[1] != "node3" || f[2] != "fd:" || f[3] != "node7" || f[5] != "failed" {
		t.Fatalf("fd line layout: %q", lines[0])
	}
	if !strings.HasSuffix(lines[0], " level=INFO") {
		t.Fatalf("fd line level: %q", lines[0])
	}
	want := `node3 sched: sched: task b/2 failed: no kernel\nat all level=WARN job=b task=2 err="no kernel\nat all"`
	if !strings.Contains(lines[1], want) {
		t.Fatalf("sched line:\n%s\nwant it to contain\n%s", lines[1], want)
	}
}

func TestJSON(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "node1", JSON, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	Printf(l, "sched")("sched: job %s accepted: %d queries", "j", 100)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %q", err, buf.String())
	}
	for k, v := range map[string]any{"level": "INFO", "msg": "sched: job j accepted: 100 queries", "node": "node1", "subsystem": "sched", "job": "j"} {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v (record %v)", k, rec[k], v, rec)
		}
	}
	if _, err := time.Parse(timeLayout, fmt.Sprint(rec["time"])); err != nil {
		t.Errorf("time %v: %v", rec["time"], err)
	}
}

func TestLevelFilter(t *testing.T) {
	var buf bytes.Buffer
	l, _ := New(&buf, "n", Text, slog.LevelWarn)
	logf := Printf(l, "x")
	logf("all fine %d", 1)
	logf("bad: %v", errors.New("e"))
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), "level=WARN") {
		t.Fatalf("at warn: %q", buf.String())
	}
	if _, err := New(&buf, "n", "xml", slog.LevelInfo); err == nil {
		t.Fatal("unknown format accepted")
	}
	if lv, err := ParseLevel("warn"); err != nil || lv != slog.LevelWarn {
		t.Fatalf("ParseLevel: %v %v", lv, err)
	}
	if _, err := ParseLevel("loud"); err == nil {
		t.Fatal("bad level accepted")
	}
}

// idunno grep searches the log file line by line: both formats keep one record a line,
// and a field is as searchable as the message.
func TestGrepFindsRecordsInBothFormats(t *testing.T) {
	for _, format := range []string{Text, JSON} {
		path := filepath.Join(t.TempDir(), "node.log")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := New(f, "node2", format, slog.LevelInfo)
		logf := Printf(l, "sched")
		logf("sched: scheduled task %s/%d (queries %d-%d) on %s", "b", 0, 0, 9, "node4")
		logf("sched: job %s: result: %v (retrying)", "b", errors.New("multi\nline"))
		logf("sched: job %s removed", "c")
		f.Close()
		for pattern, want := range map[string]int{"scheduled task b/0 ": 1, "WARN": 1, "retrying": 1, "job c removed": 1, "sched": 3} {
			res, err := logquery.Search(context.Background(), path, logquery.Request{Pattern: pattern})
			if err != nil || res.Count != want {
				t.Errorf("%s: grep %q: %d lines (%v), want %d", format, pattern, res.Count, err, want)
			}
		}
	}
}

func TestFormatCacheIsBounded(t *testing.T) {
	for i := 0; i < 3000; i++ {
		Fields(fmt.Sprintf("built at run time %d: job %%s", i), []any{"j"})
	}
	if n := formats.Len(); n > 1024 {
		t.Fatalf("%d formats cached", n)
	}
	if got := Fields("built at run time 1: job %s", []any{"j"}); len(got) != 1 || got[0].Key != "job" {
		t.Fatalf("after eviction: %v", got)
	}
}
