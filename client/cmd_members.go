package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"idunno/client/localcluster"
)

// memberJSON is one line of `idunno members --json`.
type memberJSON struct {
	Name        string `json:"name"`
	Addr        string `json:"addr"`
	Incarnation uint64 `json:"incarnation"`
	State       string `json:"state"`
}

func runMembers(args []string) error {
	fs := newFlags("members")
	t := addTargetFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON list of {name, addr, incarnation, state}")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := t.members()
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]memberJSON, 0, len(r.Members))
		for _, m := range r.Members {
			out = append(out, memberJSON{m.Name, m.Addr, m.Incarnation, m.State.String()})
		}
		e := json.NewEncoder(os.Stdout)
		e.SetIndent("", "  ")
		return e.Encode(out)
	}
	fmt.Printf("as seen by %s (%s)\n", r.Self.Name, r.Self.Addr)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tADDR\tRPC\tINCARNATION\tSTATE")
	for _, m := range r.Members {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", m.Name, m.Addr, m.RPCAddr, m.Incarnation, m.State)
	}
	return w.Flush()
}

func runLeaveJoin(verb string, args []string) error {
	fs := newFlags(verb)
	t := addTargetFlags(fs)
	node := fs.String("node", "", "node to act on (with --cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr := t.at
	if *node != "" {
		if t.cluster == "" {
			return usageErrorf("--node needs --cluster DIR (or IDUNNO_CLUSTER)")
		}
		c, err := localcluster.Open(t.cluster)
		if err != nil {
			return err
		}
		if addr = c.RPCAddr(*node); addr == "" {
			return fmt.Errorf("no node named %q in %s", *node, t.cluster)
		}
	}
	if addr == "" {
		return fmt.Errorf("name the node with --node NAME or --at HOST:PORT")
	}
	cl, err := t.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.CallJSON(ctx, addr, "fd."+verb, struct{}{}, nil)
}
