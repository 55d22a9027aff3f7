package graph

import "testing"

// TestParseEinsumLetters: upper- and lower-case letters and spaces as torch writes them,
// the implicit output in numpy's order (ellipsis, then letters used once, A-Z before a-z),
// and what is refused.
func TestParseEinsumLetters(t *testing.T) {
	for _, c := range []struct {
		eq    string
		ranks []int
		out   string // ellipsis letters written as '.'
	}{
		{"B G H I D, B G H J D -> B G H I J", []int{5, 5}, "BGHIJ"},
		{"ba", []int{2}, "ab"},
		{"Ab,bC", []int{2, 2}, "AC"},
		{"bA,aB", []int{2, 2}, "ABab"},
		{"...ij,...jk", []int{4, 4}, "..ik"},
	} {
		e, err := ParseEinsum(c.eq, c.ranks)
		if err != nil {
			t.Fatalf("%q: %v", c.eq, err)
		}
		got := make([]byte, len(e.Out))
		for i, b := range e.Out {
			got[i] = b
			if b >= ellipsisLetter {
				got[i] = '.'
			}
		}
		if string(got) != c.out {
			t.Errorf("%q: output letters %q, want %q", c.eq, got, c.out)
		}
	}
	for _, c := range []struct {
		eq    string
		ranks []int
	}{{"i1,1j", []int{2, 2}}, {"ij,jk->iK", []int{2, 2}}, {"ii->ii", []int{2}}} {
		if _, err := ParseEinsum(c.eq, c.ranks); err == nil {
			t.Errorf("%q parsed", c.eq)
		}
	}
}
