// Package logs is a node's structured log: log/slog records with levels and fields (node,
// subsystem, job, task, epoch, ...), written as text lines or as JSON.
//
// The subsystems keep their printf-style log functions (fd.Config.Logf, sdfs.Store.Logf,
// sched.Deps.Logf, ...): Printf turns each call into a record without changing its message.
// The level and the fields come from the call itself, mechanically: an error argument makes
// the record a warning, and an argument whose verb follows a known word in the format
// ("job %s", "task %s/%d", "epoch %d") becomes that field. One place converts every call
// site, and the messages `idunno grep` users search for stay as they were.
//
// The text format keeps the line layout the tools read (time, node, "subsystem:", message)
// and appends the level and the fields as key=value:
//
//	2026-11-23T19:40:01.123Z node3 sched: sched: completed task b/4 on node5 (...) level=INFO job=b task=4 worker=node5
//
// The JSON format is slog's: one object a line with time, level, msg, node, subsystem and
// the fields.
package logs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Formats of New.
const (
	Text = "text"
	JSON = "json"
)

// Keys of the fields every record of a node has.
const (
	KeyNode      = "node"
	KeySubsystem = "subsystem"
)

// New returns a logger for node writing records at level and above to w, in format Text
// (the default when format is "") or JSON.
func New(w io.Writer, node, format string, level slog.Leveler) (*slog.Logger, error) {
	var h slog.Handler
	switch format {
	case Text, "":
		h = &textHandler{out: &lockedWriter{w: w}, level: level}
	case JSON:
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: utcMillis})
	default:
		return nil, fmt.Errorf("logs: unknown format %q (want %s or %s)", format, Text, JSON)
	}
	return slog.New(h).With(KeyNode, node), nil
}

// ParseLevel reads a level name: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("logs: bad level %q (want debug, info, warn or error)", s)
	}
	return l, nil
}

func utcMillis(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		return slog.String(slog.TimeKey, a.Value.Time().UTC().Format(timeLayout))
	}
	return a
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Printf returns the printf-style log function of one subsystem: each call is one record
// whose message is fmt.Sprintf(format, args...), at Warn when an argument is an error and
// Info otherwise, with the fields Fields finds in the format.
func Printf(l *slog.Logger, subsystem string) func(format string, args ...any) {
	l = l.With(KeySubsystem, subsystem)
	return func(format string, args ...any) {
		level := slog.LevelInfo
		for _, a := range args {
			if _, ok := a.(error); ok {
				level = slog.LevelWarn
				break
			}
		}
		ctx := context.Background()
		if !l.Enabled(ctx, level) {
			return
		}
		l.LogAttrs(ctx, level, fmt.Sprintf(format, args...), Fields(format, args)...)
	}
}

// fieldWords maps the word before a verb in a format to the field its argument fills.
// "task %s/%d" is the one two-argument form: job, then task.
var fieldWords = map[string]string{
	"job": "job", "task": "task", "epoch": "epoch", "step": "step", "shard": "shard",
	"worker": "worker", "model": "model", "coordinator": "coordinator", "standby": "standby",
}

// Fields returns the fields a format names for its arguments, each once, the first
// occurrence winning: "training job %s: step %d shard %d" gives job, step and shard. An
// error argument is the field "err".
func Fields(format string, args []any) []slog.Attr {
	var out []slog.Attr
	seen := map[string]bool{}
	add := func(key string, v any) {
		if !seen[key] {
			seen[key] = true
			out = append(out, slog.Any(key, v))
		}
	}
	for _, v := range parseFormat(format) {
		if v.arg >= len(args) {
			break
		}
		if err, ok := args[v.arg].(error); ok {
			add("err", err.Error())
			continue
		}
		key, ok := fieldWords[v.word]
		if !ok {
			continue
		}
		if key == "task" && v.slashNext && v.arg+1 < len(args) {
			add("job", args[v.arg])
			add("task", args[v.arg+1])
			continue
		}
		if key == "task" {
			continue // "task %d" alone: the task's job is not named
		}
		add(key, args[v.arg])
	}
	return out
}

// verb is one formatting verb of a format: the argument it prints, the word just before it
// ("job" in "job %s"), and whether "/%" follows it ("task %s/%d").
type verb struct {
	arg       int
	word      string
	slashNext bool
}

// formats caches parsed formats. The formats in the code are few and reused; the bound
// keeps a caller that builds formats at run time from growing it for ever.
var formats = func() *lru.Cache[string, []verb] {
	c, err := lru.New[string, []verb](1024)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}()

func parseFormat(format string) []verb {
	if v, ok := formats.Get(format); ok {
		return v
	}
	var vs []verb
	arg := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		start := i
		i++
		if i < len(format) && format[i] == '%' {
			continue // "%%"
		}
		for i < len(format) && strings.IndexByte("+-# 0123456789.", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			break
		}
		v := verb{arg: arg, word: wordBefore(format[:start])}
		v.slashNext = strings.HasPrefix(format[i+1:], "/%")
		vs = append(vs, v)
		arg++
	}
	formats.Add(format, vs)
	return vs
}

// wordBefore returns the word that ends one space before the end of s ("job" in
// "sched: job "), or "" when s does not end that way.
func wordBefore(s string) string {
	if !strings.HasSuffix(s, " ") {
		return ""
	}
	s = s[:len(s)-1]
	i := len(s)
	for i > 0 && (s[i-1] >= 'a' && s[i-1] <= 'z' || s[i-1] >= 'A' && s[i-1] <= 'Z') {
		i--
	}
	return s[i:]
}

// lockedWriter serializes the lines of every handler derived from one logger.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(b)
	return err
}

// textHandler writes "TIME NODE SUBSYSTEM: MESSAGE level=LEVEL key=value ...", the node
// and subsystem taken from the fields of those names.
type textHandler struct {
	out   *lockedWriter
	level slog.Leveler
	attrs []slog.Attr
	group string
}

func (h *textHandler) Enabled(_ context.Context, l slog.Level) bool {
	min := slog.LevelInfo
	if h.level != nil {
		min = h.level.Level()
	}
	return l >= min
}

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), h.qualify(as)...)
	return &c
}

func (h *textHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}

func (h *textHandler) qualify(as []slog.Attr) []slog.Attr {
	if h.group == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: h.group + a.Key, Value: a.Value}
	}
	return out
}

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	attrs := append([]slog.Attr(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, h.qualify([]slog.Attr{a})...)
		return true
	})
	node, sub := "-", "-"
	var rest []slog.Attr
	for _, a := range attrs {
		switch a.Key {
		case KeyNode:
			node = a.Value.String()
		case KeySubsystem:
			sub = a.Value.String()
		default:
			rest = append(rest, a)
		}
	}
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	var b strings.Builder
	b.WriteString(t.UTC().Format(timeLayout))
	b.WriteString(" ")
	b.WriteString(node)
	b.WriteString(" ")
	b.WriteString(sub)
	b.WriteString(": ")
	b.WriteString(oneLine(r.Message))
	b.WriteString(" level=")
	b.WriteString(r.Level.String())
	for _, a := range rest {
		b.WriteString(" ")
		b.WriteString(a.Key)
		b.WriteString("=")
		b.WriteString(quote(a.Value.Resolve().String()))
	}
	b.WriteString("\n")
	return h.out.write([]byte(b.String()))
}

// oneLine keeps a record on one line, so that line-based tools see whole records.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
}

// quote leaves simple values bare and quotes the others as Go strings, as slog's text
// handler does.
func quote(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r <= ' ' || r == '=' || r == '"' || r > '~' {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}
