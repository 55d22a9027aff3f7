package main

import (
	"fmt"
	"os"

	"idunno/client/localcluster"
)

func runCluster(args []string) error {
	if len(args) == 0 {
		return usageError("usage: idunno cluster up|down|kill|stop|cont|restart --dir DIR ...")
	}
	sub, rest := args[0], args[1:]
	if wantsHelp(args[:1]) {
		rest = args // idunno cluster --help: the flags every verb takes
	}
	fs := newFlags("cluster " + sub)
	dir := fs.String("dir", os.Getenv("IDUNNO_CLUSTER"), "cluster directory (default $IDUNNO_CLUSTER)")
	fs.StringVar(dir, "cluster", *dir, "the same as --dir (the global flag of the other commands)")
	nodes := fs.Int("nodes", 10, "number of nodes (up)")
	base := fs.Int("base-port", 0, "base port of node0; node i uses base+10*i (up; 0 picks a free one)")
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if *dir == "" {
		return usageError("--dir is required")
	}
	localcluster.DieWithParent = false // nodes outlive this command
	if sub == "up" {
		c, err := localcluster.Up(*dir, *nodes, *base, "")
		if err != nil {
			return err
		}
		for _, n := range c.Nodes() {
			fmt.Printf("%s fd=%s rpc=%s http=%s pid=%d\n", n.Name, n.FDAddr, n.RPCAddr, n.HTTPAddr, n.PID)
		}
		fmt.Printf("cluster of %d nodes converged; use --cluster %s (or IDUNNO_CLUSTER=%s)\n", *nodes, c.Dir(), c.Dir())
		return nil
	}
	c, err := localcluster.Open(*dir)
	if err != nil {
		return err
	}
	names := fs.Args()
	switch sub {
	case "down":
		return c.Down()
	case "kill":
		return c.Kill(names...)
	case "stop":
		return c.Stop(names...)
	case "cont":
		return c.Cont(names...)
	case "restart":
		return c.Restart(names...)
	}
	return usageErrorf("unknown subcommand %q", sub)
}
