package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"idunno/sdfs"
)

// sdfsFlags parses a command's flags wherever they sit among its positional arguments and
// checks their number.
func sdfsFlags(fs *flag.FlagSet, args []string, want int, usage string) ([]string, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if want >= 0 && len(pos) != want {
		return nil, usageErrorf("usage: idunno %s", usage)
	}
	return pos, nil
}

// sdfsClient returns a client that learns the membership from the target's nodes.
func sdfsClient(t *target) (*sdfs.Client, error) {
	addrs, _, err := t.candidates()
	if err != nil {
		return nil, err
	}
	cl, err := t.client()
	if err != nil {
		return nil, err
	}
	return sdfs.NewClient(sdfs.DefaultConfig(), cl, sdfs.GatewayMembers(cl, addrs)), nil
}

// sdfsContext is cancelled by Ctrl-C, so a long transfer stops cleanly (and a put aborts).
func sdfsContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func rate(n int64, d time.Duration) string {
	return fmt.Sprintf("%.1f MB/s", float64(n)/1e6/max(d.Seconds(), 1e-9))
}

func runPut(args []string) error {
	fs := newFlags("put")
	t := addTargetFlags(fs)
	pos, err := sdfsFlags(fs, args, 2, "put LOCAL NAME")
	if err != nil {
		return err
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	start := time.Now()
	var v sdfs.Version
	var n int64
	if pos[0] == "-" {
		p := startProgress("put stdin as "+pos[1], "B", 0)
		cr := &countingReader{r: progressReader{os.Stdin, p}}
		v, err = c.Put(ctx, pos[1], cr)
		p.finish()
		n = cr.n
	} else {
		var size int64
		if st, err := os.Stat(pos[0]); err == nil {
			size = st.Size()
		}
		p := startProgress("put "+pos[0], "B", size)
		v, n, err = c.WithProgress(p.add).PutFile(ctx, pos[0], pos[1])
		p.finish()
	}
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "put %s as %s version %s: %d bytes in %.3fs (%s)\n", pos[0], pos[1], v, n, el.Seconds(), rate(n, el))
	return nil
}

func runGet(args []string) error {
	fs := newFlags("get")
	t := addTargetFlags(fs)
	pos, err := sdfsFlags(fs, args, 2, "get NAME LOCAL")
	if err != nil {
		return err
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	start := time.Now()
	var info sdfs.VersionInfo
	p := startProgress("get "+pos[0], "B", sizeOnTerminal(ctx, c, pos[0]))
	pc := c.WithProgress(p.add)
	if pos[1] == "-" {
		info, err = pc.Get(ctx, pos[0], os.Stdout)
	} else {
		info, err = pc.GetFile(ctx, pos[0], pos[1])
	}
	p.finish()
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "got %s version %s into %s: %d bytes in %.3fs (%s)\n", pos[0], info.Version, pos[1], info.Size, el.Seconds(), rate(info.Size, el))
	return nil
}

func runDelete(args []string) error {
	fs := newFlags("delete")
	t := addTargetFlags(fs)
	pos, err := sdfsFlags(fs, args, 1, "delete NAME")
	if err != nil {
		return err
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	if err := c.Delete(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Printf("deleted %s\n", pos[0])
	return nil
}

func printJSON(v any) error {
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

func fmtTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339) }

func runLs(args []string) error {
	fs := newFlags("ls")
	t := addTargetFlags(fs)
	prefix := fs.String("prefix", "", "list the names starting with this prefix")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := sdfsFlags(fs, args, -1, "ls NAME | ls --prefix P")
	if err != nil {
		return err
	}
	prefixSet := false
	fs.Visit(func(f *flag.Flag) { prefixSet = prefixSet || f.Name == "prefix" })
	if len(pos) > 1 || (len(pos) == 1) == prefixSet {
		return usageErrorf("usage: idunno ls NAME | ls --prefix P")
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	if prefixSet {
		files, err := c.List(ctx, *prefix)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(files)
		}
		fmt.Fprintln(w, "NAME\tSIZE\tVERSION\tWRITTEN")
		for _, f := range files {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", f.Name, f.Size, f.Version, fmtTime(f.Created))
		}
		return w.Flush()
	}
	hs, err := c.Ls(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(hs)
	}
	fmt.Fprintln(w, "NODE\tVERSION\tSIZE\tWRITTEN")
	for _, h := range hs {
		for i := len(h.Versions) - 1; i >= 0; i-- {
			v := h.Versions[i]
			size := strconv.FormatInt(v.Size, 10)
			if v.Deleted {
				size = "deleted"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", h.Node, v.Version, size, fmtTime(v.Created))
		}
	}
	return w.Flush()
}

func runStoreCmd(args []string) error {
	fs := newFlags("store")
	t := addTargetFlags(fs)
	node := fs.String("node", "", "node whose store to list (default: the node answering)")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := sdfsFlags(fs, args, 0, "store [--node NODE]"); err != nil {
		return err
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	if *node == "" {
		r, err := t.members()
		if err != nil {
			return err
		}
		*node = r.Self.Name
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	files, err := c.Store(ctx, *node)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(files)
	}
	var total int64
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tVERSIONS\tNEWEST\tSIZE")
	for _, f := range files {
		nv := f.Versions[len(f.Versions)-1]
		size := strconv.FormatInt(nv.Size, 10)
		if nv.Deleted {
			size = "deleted"
		}
		for _, v := range f.Versions {
			total += v.Size
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", f.Name, len(f.Versions), nv.Version, size)
	}
	w.Flush()
	fmt.Printf("%s holds %d names, %d bytes\n", *node, len(files), total)
	return nil
}

func runGetVersions(args []string) error {
	fs := newFlags("get-versions")
	t := addTargetFlags(fs)
	pos, err := sdfsFlags(fs, args, 3, "get-versions NAME N LOCAL")
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(pos[1])
	if err != nil || n <= 0 {
		return fmt.Errorf("N must be a positive integer, got %q", pos[1])
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	f, err := os.Create(pos[2])
	if err != nil {
		return err
	}
	got, err := c.GetVersions(ctx, pos[0], n, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(pos[2])
		return err
	}
	fmt.Printf("wrote %d versions of %s into %s, newest first\n", got, pos[0], pos[2])
	return nil
}

func runPutDir(args []string) error {
	fs := newFlags("putdir")
	t := addTargetFlags(fs)
	pos, err := sdfsFlags(fs, args, 2, "putdir LOCALDIR PREFIX")
	if err != nil {
		return err
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	start := time.Now()
	p := startProgress("putdir "+pos[0], "B", localDirSize(pos[0]))
	r, err := c.WithProgress(p.add).PutDir(ctx, pos[0], pos[1])
	p.finish()
	if err != nil {
		return err
	}
	fmt.Printf("put %d files (%d bytes) under %s/ in %.2fs\n", r.Files, r.Bytes, pos[1], time.Since(start).Seconds())
	return nil
}

func runGetDir(args []string) error {
	fs := newFlags("getdir")
	t := addTargetFlags(fs)
	pos, err := sdfsFlags(fs, args, 2, "getdir PREFIX LOCALDIR")
	if err != nil {
		return err
	}
	c, err := sdfsClient(t)
	if err != nil {
		return err
	}
	ctx, cancel := sdfsContext()
	defer cancel()
	start := time.Now()
	p := startProgress("getdir "+pos[0], "B", sizeOnTerminal(ctx, c, strings.TrimSuffix(pos[0], "/")+"/"))
	r, err := c.WithProgress(p.add).GetDir(ctx, pos[0], pos[1])
	p.finish()
	if err != nil {
		return err
	}
	fmt.Printf("got %d files (%d bytes) from %s/ into %s in %.2fs\n", r.Files, r.Bytes, pos[0], pos[1], time.Since(start).Seconds())
	return nil
}

// sizeOnTerminal returns the size of name, or the total size under name when it ends in
// "/", for a progress bar; 0 (unknown) when stderr is not a terminal, to save the call.
func sizeOnTerminal(ctx context.Context, c *sdfs.Client, name string) int64 {
	if !isTerminal(os.Stderr) {
		return 0
	}
	files, err := c.List(ctx, name)
	if err != nil {
		return 0
	}
	var total int64
	for _, f := range files {
		if f.Name == name || strings.HasSuffix(name, "/") {
			total += f.Size
		}
	}
	return total
}

// localDirSize is the total size of the regular files under dir (0 if it cannot be read).
func localDirSize(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
