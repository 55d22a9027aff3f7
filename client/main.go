// Command idunno is IDunno's one binary: the node daemon (`idunno node`) and the client
// (every other command, and `idunno shell`).
package main

import (
	"fmt"
	"os"
	"sort"
)

// command is one top-level subcommand. Files named cmd_*.go register theirs in init.
type command struct {
	name, usage, summary string
	run                  func(args []string) error
}

var commands = map[string]*command{}

func register(name, usage, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("idunno: duplicate command " + name)
	}
	commands[name] = &command{name: name, usage: usage, summary: summary, run: run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: idunno COMMAND [ARGS]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-60s %s\n", commands[n].usage, commands[n].summary)
	}
}

func main() {
	os.Exit(dispatch(os.Args[1:]))
}

// dispatch runs one command line and returns the process exit status.
func dispatch(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "idunno: unknown command %q (run idunno help)\n", args[0])
		return 2
	}
	if err := c.run(args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "idunno %s: %v\n", c.name, err)
		return 1
	}
	return 0
}
