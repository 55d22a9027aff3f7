package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"idunno/fd"
	"idunno/sched/logquery"
)

func runGrep(args []string) error {
	fs := newFlags("grep")
	t := addTargetFlags(fs)
	node := fs.String("node", "", "search only this node's log")
	max := fs.Int("max", logquery.MaxMatches, "matching lines to print per node (all are counted)")
	timeout := fs.Duration("timeout", logquery.DefaultTimeout, "how long each node may search")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("want one PATTERN (usage: idunno grep PATTERN [--node NODE])")
	}
	members, err := t.nodes()
	if err != nil {
		return err
	}
	nodes, err := grepTargets(members, *node)
	if err != nil {
		return err
	}
	cl, err := t.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+2*time.Second)
	defer cancel()
	res, err := logquery.Grep(ctx, cl, nodes, logquery.Request{Pattern: pos[0], Max: *max, TimeoutMS: timeout.Milliseconds()})
	if err != nil {
		return err
	}
	return printGrep(os.Stdout, res)
}

// grepTargets picks the live nodes to ask (alive or suspect), or the one named.
func grepTargets(members []fd.Member, only string) ([]logquery.Node, error) {
	var nodes []logquery.Node
	for _, m := range members {
		live := m.State == fd.Alive || m.State == fd.Suspect
		if only != "" && m.Name == only {
			if !live {
				return nil, fmt.Errorf("node %s is %s", only, m.State)
			}
			return []logquery.Node{{Name: m.Name, RPCAddr: m.RPCAddr}}, nil
		}
		if only == "" && live {
			nodes = append(nodes, logquery.Node{Name: m.Name, RPCAddr: m.RPCAddr})
		}
	}
	if only != "" {
		return nil, fmt.Errorf("no node %q in the cluster", only)
	}
	return nodes, nil
}

// printGrep prints "NODE: LINE" for every match, then one count line per node. It fails
// only when no node could be searched.
func printGrep(w io.Writer, res []logquery.Result) error {
	failed := 0
	for _, r := range res {
		for _, l := range r.Lines {
			fmt.Fprintf(w, "%s: %s\n", r.Node, l)
		}
	}
	fmt.Fprintln(w, "--")
	total := 0
	for _, r := range res {
		switch {
		case r.Err != nil:
			failed++
			fmt.Fprintf(w, "%s: error: %v\n", r.Node, r.Err)
		case r.Truncated:
			fmt.Fprintf(w, "%s: %d matching lines (%d shown)\n", r.Node, r.Count, len(r.Lines))
		default:
			fmt.Fprintf(w, "%s: %d matching lines\n", r.Node, r.Count)
		}
		total += r.Count
	}
	fmt.Fprintf(w, "total: %d matching lines on %d nodes\n", total, len(res)-failed)
	if failed > 0 && failed == len(res) {
		return errors.New("no node could be searched")
	}
	return nil
}

// parseInterleaved parses flags that may come before or after positional arguments
// ("grep PATTERN --node n1"); "--" ends the flags, so "grep -- -x" searches for "-x".
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
