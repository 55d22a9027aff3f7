package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// runShell reads command lines and runs each as `idunno LINE`. Flags given to the shell
// itself (--cluster DIR, --at HOST:PORT) become the target of every command through the
// environment, the same defaults the one-shot commands read.
func runShell(args []string) error {
	fs := newFlags("shell")
	t := addTargetFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("usage: idunno shell [--cluster DIR | --at HOST:PORT]")
	}
	os.Setenv("IDUNNO_CLUSTER", t.cluster)
	os.Setenv("IDUNNO_AT", t.at)
	return shellLoop(os.Stdin, os.Stdout, dispatch)
}

// shellLoop runs each line read from in with run (dispatch, in the real shell).
func shellLoop(in io.Reader, out io.Writer, run func(args []string) int) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for {
		fmt.Fprint(out, "idunno> ")
		if !sc.Scan() {
			fmt.Fprintln(out)
			return sc.Err()
		}
		words, err := splitWords(sc.Text())
		if err != nil {
			fmt.Fprintln(out, "idunno:", err)
			continue
		}
		if len(words) == 0 {
			continue
		}
		switch words[0] {
		case "exit", "quit":
			return nil
		case "shell":
			fmt.Fprintln(out, "idunno: already in the shell")
			continue
		case "node":
			fmt.Fprintln(out, "idunno: run nodes with `idunno node` outside the shell")
			continue
		}
		run(words) // errors are printed by run; the shell goes on
	}
}

// splitWords splits a line into words, honouring single and double quotes and backslashes.
func splitWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quote := false, rune(0)
	escaped := false
	for _, r := range line {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, errors.New("unterminated quote or escape")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
