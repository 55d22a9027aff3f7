package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"put a b", []string{"put", "a", "b"}},
		{"  grep 'task .* done'  --node node3 ", []string{"grep", "task .* done", "--node", "node3"}},
		{`put "my file" x\ y`, []string{"put", "my file", "x y"}},
		{`grep ''`, []string{"grep", ""}},
		{"", nil},
	} {
		got, err := splitWords(c.in)
		if err != nil || !cmp.Equal(got, c.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := splitWords(`put "unterminated`); err == nil {
		t.Error("unterminated quote accepted")
	}
}

func TestShellRunsCommandsAndSurvivesErrors(t *testing.T) {
	var got [][]string
	run := func(args []string) int {
		if args[0] != "shelltest" {
			return exitUsage
		}
		got = append(got, args[1:])
		if len(args) > 1 && args[1] == "fail" {
			return exitFailure
		}
		return exitOK
	}
	in := strings.NewReader("shelltest a 'b c'\n\nshelltest fail\nbogus-command\nshelltest after\nexit\nshelltest never\n")
	var out strings.Builder
	if err := shellLoop(in, &out, run); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"a", "b c"}, {"fail"}, {"after"}}
	if !cmp.Equal(got, want) {
		t.Fatalf("commands run: %q, want %q", got, want)
	}
	if !strings.Contains(out.String(), "idunno> ") {
		t.Fatalf("no prompt in %q", out.String())
	}
}
