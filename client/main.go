// Command idunno is IDunno's one binary: the node daemon (`idunno node`) and the client
// (every other command, and `idunno shell`).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"idunno/serving"
)

// command is one top-level subcommand. Its run function owns its flags: it declares them on
// a set from newFlags and parses its arguments itself, so flags may sit before or after
// positional arguments, as each command always allowed.
type command struct {
	name, usage, summary string
	run                  func(args []string) error
	// verbs are the command's own subcommands (job add, cluster up): completion offers them
	// and asks the verb, not the command, for its flags.
	verbs []string
}

// commands lists every command, in the order `idunno help` prints them. This is the one
// place commands are registered.
func commands() []command {
	return []command{
		{name: "cluster", usage: "cluster up --nodes N --dir DIR [--base-port P] | down|kill|stop|cont|restart --dir DIR [NODE...]",
			summary: "start and control a local cluster of node processes on 127.0.0.1", run: runCluster,
			verbs: []string{"up", "down", "kill", "stop", "cont", "restart"}},
		{name: "node", usage: "node --config FILE | --name N --host H --base-port P --data-dir D [--introducers A,B] [--secret S] [--threads T] [--fd-nice N] [--compute-nice N] [--log-format text|json] [--log-level L]",
			summary: "run one node until SIGTERM or SIGINT (then leave the cluster)", run: runNode},
		{name: "members", usage: "members [--json] [--cluster DIR | --at HOST:PORT]",
			summary: "print the membership as one node sees it", run: runMembers},
		{name: "leave", usage: "leave --node NAME [--cluster DIR] | --at HOST:PORT",
			summary: "make one node leave the cluster voluntarily (it keeps running, quiet)", run: func(a []string) error { return runLeaveJoin("leave", a) }},
		{name: "join", usage: "join --node NAME [--cluster DIR] | --at HOST:PORT",
			summary: "make a node that left join the cluster again", run: func(a []string) error { return runLeaveJoin("join", a) }},
		{name: "grep", usage: "grep PATTERN [--node NODE] [--max N] [--cluster DIR | --at HOST:PORT]",
			summary: "search every live node's log (Go regexp) and print matching lines with the node's name", run: runGrep},
		{name: "put", usage: "put LOCAL NAME [--cluster DIR | --at HOST:PORT]",
			summary: "store a local file (- for stdin) in SDFS as a new version of NAME", run: runPut},
		{name: "get", usage: "get NAME LOCAL", summary: "fetch the newest version of NAME into a local file (- for stdout)", run: runGet},
		{name: "delete", usage: "delete NAME", summary: "delete NAME (every version) from SDFS", run: runDelete},
		{name: "ls", usage: "ls NAME | ls --prefix P [--json]",
			summary: "which nodes hold NAME and its versions; or list names starting with P", run: runLs},
		{name: "store", usage: "store [--node NODE] [--json]", summary: "list what one node stores (default: the node answering)", run: runStoreCmd},
		{name: "get-versions", usage: "get-versions NAME N LOCAL",
			summary: "fetch the newest N versions of NAME, newest first, into one file with delimiters", run: runGetVersions},
		{name: "putdir", usage: "putdir LOCALDIR PREFIX", summary: "store every file under LOCALDIR as PREFIX/<relative path>", run: runPutDir},
		{name: "getdir", usage: "getdir PREFIX LOCALDIR", summary: "fetch every file under PREFIX/ into LOCALDIR", run: runGetDir},
		{name: "train", usage: "train local --model INIT.onnx --data IMAGES --labels LABELS --epochs E --batch B --out OUT.onnx ... | train start|stop | train add --name N --model FILE.onnx|zoo:NAME [--input-shape C,H,W] [--classes K] | train remove --name N | train list",
			summary: "training phase: start or stop it; add a training job (validates the model, stores it in SDFS)", run: runTrain,
			verbs: []string{"local", "start", "stop", "add", "remove", "list", "stats", "wait"}},
		{name: "inference", usage: "inference start|stop",
			summary: "inference phase: start it (jobs run) or stop it (jobs pause, nothing is lost)", run: runInference,
			verbs: []string{"start", "stop"}},
		{name: "job", usage: "job add|result|wait|remove|list|stats ... (idunno job help)",
			summary: "inference jobs: add, fetch results, wait, remove, list, statistics", run: runJob,
			verbs: []string{"add", "result", "wait", "remove", "list", "stats"}},
		{name: "top", usage: "top [--once] [--interval D]",
			summary: "live view of every job: progress, rate, latency percentiles, shares; refreshed every second (one snapshot when not on a terminal)", run: runTop},
		{name: "serve", usage: "serve MODEL --sdfs NAME [--nodes N1,N2 | --replicas K] [--max-batch B] [--max-delay D] [--max-queue Q] [--instances I] [--precision fp32|bf16|int8]",
			summary: "load a model from SDFS on some nodes and serve it over HTTP (KServe v2)", run: runServe},
		{name: "served", usage: "served [--json]", summary: "list the models each node serves over HTTP", run: runServed},
		{name: "unserve", usage: "unserve MODEL [--nodes N1,N2]", summary: "stop serving a model over HTTP (on every node serving it, or on the ones named)", run: runUnserve},
		{name: "infer", usage: "infer --model M.onnx --input input_0.pb [--input ...] --output-dir DIR [--threads N] [--precision fp32|bf16|int8]",
			summary: "run a model through the kernel on TensorProto inputs; writes DIR/output_<i>.pb", run: runInfer},
		{name: "bench", usage: "bench kernel|train --model M.onnx --batch B --threads T --seconds S [--precision fp32|bf16|int8] [--json]",
			summary: "measure kernel inference or training throughput and fraction of the FP32 FMA peak", run: runBench,
			verbs: []string{"kernel", "train"}},
		{name: "eval", usage: "eval --model M.onnx --data IMAGES --labels LABELS [preprocessing flags] [--batch B] [--threads T] [--precision fp32|bf16|int8] [--agreement] [--json]",
			summary: "top-1 accuracy of a model on a labelled dataset", run: runEval},
		{name: "quantize", usage: quantizeUsage,
			summary: "calibrate activation ranges on a dataset and write a standard QDQ int8 model (then run it with --precision int8)", run: runQuantize},
		{name: "zoo", usage: zooUsage, summary: zooSummary(), run: runZoo},
		{name: "shell", usage: "shell [--cluster DIR | --at HOST:PORT]",
			summary: "interactive shell: type any idunno command without the leading idunno (help, exit)", run: runShell},
	}
}

// Exit statuses: scripts tell a wrong command line from a failed one from a wait that ran
// out of time.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitTimeout = 3
)

// usageErr is a command line the command cannot run (exit status 2).
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func usageError(msg string) error { return &usageErr{msg} }

func usageErrorf(format string, args ...any) error {
	return &usageErr{fmt.Sprintf(format, args...)}
}

// timeoutErr is a wait that gave up (exit status 3).
type timeoutErr struct{ msg string }

func (e *timeoutErr) Error() string { return e.msg }

func timeoutErrorf(format string, args ...any) error {
	return &timeoutErr{fmt.Sprintf(format, args...)}
}

// version is set at build time (-ldflags "-X main.version=v1.2.3"); without it the module
// version and VCS revision recorded in the build info are used.
var version string

func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v + " " + bi.GoVersion
}

// invocation records the flag sets the running command declared, so that --help and shell
// completion can print them. Commands run one at a time in a process (the shell runs them
// in turn), so one record is enough.
var invocation struct {
	flags    *flag.FlagSet // the last set newFlags made
	badParse bool          // a flag set rejected the command line
}

// newFlags returns a flag set for one command. It prints nothing itself: a parse error is
// returned to dispatch (exit status 2), and -h/--help makes the command return flag.ErrHelp
// so dispatch prints the help on stdout.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { invocation.badParse = true }
	invocation.flags = fs
	return fs
}

func main() {
	serving.BuildVersion = version // /metrics' idunno_build_info says what --version says
	os.Exit(dispatch(os.Args[1:]))
}

// dispatch runs one command line and returns the process exit status.
func dispatch(args []string) int {
	return dispatchTo(args, os.Stdout, os.Stderr)
}

func dispatchTo(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		root := newRoot(stdout, stderr, nil)
		root.SetOut(stderr)
		root.Usage()
		return exitUsage
	}
	status := exitOK
	root := newRoot(stdout, stderr, &status)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	if err != nil {
		// Commands report their own errors through status; what reaches here is cobra's
		// (an unknown command, a bad root flag, completion's arguments): usage errors.
		fmt.Fprintf(stderr, "idunno: %v (run idunno help)\n", err)
		return exitUsage
	}
	return status
}

// newRoot builds the command tree: one cobra command per entry of commands(). cobra brings
// the help and usage text, `idunno help CMD`, --version, persistent global flags that may
// come before the subcommand, and bash/zsh completion scripts. Each command parses its own
// flags (DisableFlagParsing), so its flags and positional arguments keep their meaning;
// cobra learns them for help and completion by asking the command for its help.
func newRoot(stdout, stderr io.Writer, status *int) *cobra.Command {
	root := &cobra.Command{
		Use:           "idunno COMMAND [ARGS]",
		Short:         "IDunno: a distributed deep-learning cluster (node daemon and client)",
		Version:       buildVersion(),
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			// Only bash and zsh are supported and tested.
			DisableDefaultCmd: true,
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("idunno {{.Version}}\n")
	// The global flags (globalFlags): every client command accepts them, before or after
	// its name. They are declared here so cobra can find the command name behind them; the
	// command's own flag set parses them.
	root.PersistentFlags().String("cluster", "", "local cluster directory (default $IDUNNO_CLUSTER)")
	root.PersistentFlags().String("at", "", "RPC address HOST:PORT of a node (default $IDUNNO_AT; secret from IDUNNO_SECRET)")
	root.PersistentFlags().Bool("json", false, "print JSON (commands that print tables)")
	for _, c := range commands() {
		root.AddCommand(cobraCommand(c, stdout, stderr, status))
	}
	root.AddCommand(completionCommand(root))
	return root
}

// globalFlags are the root's persistent flags.
var globalFlags = map[string]bool{"cluster": true, "at": true, "json": true}

func cobraCommand(c command, stdout, stderr io.Writer, status *int) *cobra.Command {
	cc := &cobra.Command{
		Use:                c.usage,
		Short:              c.summary,
		DisableFlagParsing: true,
		SilenceErrors:      true,
		SilenceUsage:       true,
		RunE: func(cmd *cobra.Command, args []string) error {
			*status = runCommand(c, args, stdout, stderr)
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return complete(c, args, toComplete)
		},
	}
	cc.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		// `idunno help CMD`: the same text as `idunno CMD --help`.
		runCommand(c, []string{"--help"}, cmd.OutOrStdout(), stderr)
	})
	return cc
}

// runCommand runs one command and maps its outcome to an exit status.
func runCommand(c command, args []string, stdout, stderr io.Writer) int {
	invocation.flags, invocation.badParse = nil, false
	help := wantsHelp(args)
	if help {
		fmt.Fprintf(stdout, "Usage:\n  idunno %s\n\n%s\n", c.usage, c.summary)
	}
	args = dropUnusedGlobals(c, hoistFirstWord(args))
	invocation.flags, invocation.badParse = nil, false // forget dropUnusedGlobals' look
	err := c.run(args)
	var ue *usageErr
	var te *timeoutErr
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		if !help {
			fmt.Fprintf(stdout, "Usage:\n  idunno %s\n\n%s\n", c.usage, c.summary)
		}
		if fs := invocation.flags; fs != nil {
			fmt.Fprintf(stdout, "\nFlags:\n%s", flagUsages(fs))
		}
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "idunno %s: %v (idunno %s --help)\n", c.name, err, c.name)
		return exitUsage
	case invocation.badParse:
		fmt.Fprintf(stderr, "idunno %s: %v\nusage: idunno %s (idunno %s --help)\n", c.name, err, c.usage, c.name)
		return exitUsage
	case errors.As(err, &te):
		fmt.Fprintf(stderr, "idunno %s: %v\n", c.name, err)
		return exitTimeout
	default:
		fmt.Fprintf(stderr, "idunno %s: %v\n", c.name, err)
		return exitFailure
	}
}

// hoistFirstWord moves global flags given before a command's first word (its verb, or its
// first positional argument) to just after that word: `idunno --json job list` reaches the
// job command as "list --json", where its verb's flag set parses the flag.
func hoistFirstWord(args []string) []string {
	i := 0
	for i < len(args) {
		switch a := args[i]; {
		case a == "--cluster" || a == "-cluster" || a == "--at" || a == "-at":
			i += 2
		case a == "--json" || a == "-json" || strings.HasPrefix(a, "--cluster=") || strings.HasPrefix(a, "--at=") || strings.HasPrefix(a, "--json="):
			i++
		default:
			if i == 0 || strings.HasPrefix(a, "-") {
				return args
			}
			out := append([]string{a}, args[:i]...)
			return append(out, args[i+1:]...)
		}
	}
	return args
}

// dropUnusedGlobals removes the global flags the command (or its verb) does not declare:
// `idunno --cluster D zoo lenet5 ...` runs zoo, which needs no cluster, as kubectl ignores
// its global flags where they mean nothing.
func dropUnusedGlobals(c command, args []string) []string {
	verb := ""
	if len(args) > 0 && contains(c.verbs, args[0]) {
		verb = args[0]
	}
	declared := map[string]bool{}
	for _, f := range commandFlags(c, verb) {
		declared[f.Name] = true
	}
	if len(declared) == 0 {
		return args // the command would not say: leave its arguments alone
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !globalFlags[name] || declared[name] {
			out = append(out, a)
			continue
		}
		if name != "json" && !hasValue {
			i++ // its value
		}
	}
	return out
}

// wantsHelp reports whether the command line asks for help (before any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// flagUsages renders a command's flags in the --name style of the global ones.
func flagUsages(fs *flag.FlagSet) string {
	pf := pflag.NewFlagSet(fs.Name(), pflag.ContinueOnError)
	pf.AddGoFlagSet(fs)
	return pf.FlagUsages()
}

// complete offers a command's verbs, then its flags (when the word starts with "-"), then
// file names.
func complete(c command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	verb := ""
	if len(args) > 0 && contains(c.verbs, args[0]) {
		verb = args[0]
	}
	if len(args) == 0 && len(c.verbs) > 0 && !strings.HasPrefix(toComplete, "-") {
		return c.verbs, cobra.ShellCompDirectiveNoFileComp
	}
	if !strings.HasPrefix(toComplete, "-") {
		return nil, cobra.ShellCompDirectiveDefault
	}
	var out []string
	for _, f := range commandFlags(c, verb) {
		if globalFlags[f.Name] {
			continue // cobra offers the global flags itself
		}
		out = append(out, "--"+f.Name+"\t"+firstLine(f.Usage))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// commandFlags asks a command (or one verb of it) for its help and returns the flags it
// declared on the way: every command declares its flags before it parses its arguments, and
// parsing stops at -help before the command does anything.
func commandFlags(c command, verb string) []*flag.Flag {
	if verb == "" && len(c.verbs) > 0 {
		return nil // the flags are the verb's; the command itself only dispatches
	}
	invocation.flags = nil
	args := []string{"-help"}
	if verb != "" {
		args = []string{verb, "-help"}
	}
	if err := c.run(args); !errors.Is(err, flag.ErrHelp) || invocation.flags == nil {
		return nil
	}
	var out []*flag.Flag
	invocation.flags.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// completionCommand prints a bash or zsh completion script.
func completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh",
		Short:     "print a shell completion script (bash: source <(idunno completion bash); zsh: idunno completion zsh > \"${fpath[1]}/_idunno\")",
		ValidArgs: []string{"bash", "zsh"},
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(cmd.OutOrStdout(), true)
			default:
				return root.GenZshCompletion(cmd.OutOrStdout())
			}
		},
	}
}
