// Package dispatch is the inference scheduler's pure decision core: which task each worker
// runs next, leases and their expiry, and the fair-time control that keeps the running
// jobs' query rates level; state in, decisions out, time passed in.
//
// The coordinator (package sched) owns a Core under its mutex and wraps the I/O around it:
//
//	exp, rs := core.Tick(now, alive, self)       // every Tick: expire leases, run the controller
//	gave := core.Heard(now, worker, held, done, waiting) // a worker's pull: adopt and reconcile its leases
//	// ... journal each done task, then:
//	rs = core.Completed(now, job, task, cost)
//	orders, rs := core.Lease(now, worker, want)  // then send the orders
//
// Every Resize returned is a decision the caller journals (it changes the job's Tasks);
// Sim runs a Core with many simulated workers on a fake clock.
package dispatch
