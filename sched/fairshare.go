package sched

import "idunno/sched/dispatch"

// NameLess orders node names naturally: node2 before node10.
func NameLess(a, b string) bool { return dispatch.NameLess(a, b) }
