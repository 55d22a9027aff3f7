package sched

import (
	"fmt"

	"idunno/rpc"
)

// Error codes of the scheduler's RPC methods (rpc.Coded): a caller branches on them, through
// Retryable, Unconfirmed and IsNoJob, never on an error's text.
const (
	// CodeRetry: the call was not carried out (no coordinator right now, this node stopped
	// coordinating, the coordinator could not be reached before the call was sent); send it
	// again, to this node or another.
	CodeRetry = "sched.retry"
	// CodeUnconfirmed: a change was not confirmed, so it may or may not take effect (the
	// standby did not confirm it in time, the coordinator stepped down while it waited, a
	// forwarded call's answer was lost). Sending it again with the same request key is safe
	// (a job add is idempotent by JobSpec.Request).
	CodeUnconfirmed = "sched.unconfirmed"
	// CodeFenced: an order carried an old coordinator epoch (*FencedError).
	CodeFenced = "sched.fenced"
	// CodeNoJob: the job named does not exist.
	CodeNoJob = "sched.no_job"
)

// codedError is an error with one of the codes above; its text is err's.
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string   { return e.err.Error() }
func (e *codedError) Unwrap() error   { return e.err }
func (e *codedError) RPCCode() string { return e.code }

// retryErrorf is a CodeRetry error.
func retryErrorf(format string, args ...any) error {
	return &codedError{CodeRetry, fmt.Errorf(format, args...)}
}

// noTrainJobError is the CodeNoJob error for training job name.
func noTrainJobError(name string) error {
	return &codedError{CodeNoJob, fmt.Errorf("sched: no training job %q", name)}
}

// noJobError is the CodeNoJob error for job name.
func noJobError(name string) error {
	return &codedError{CodeNoJob, fmt.Errorf("sched: no job %q", name)}
}

// notAuthoritative marks an error without a code as CodeRetry when the node that answered
// no longer coordinates (coordinating: whether it does now, asked after the answer): the
// answer came from a state another coordinator may have moved on from, so the caller asks
// again. Coded errors keep their code.
func notAuthoritative(err error, coordinating bool) error {
	if err == nil || coordinating || rpc.CodeOf(err) != "" {
		return err
	}
	return &codedError{CodeRetry, err}
}

// RPCCode makes a *FencedError an rpc.Coded error.
func (e *FencedError) RPCCode() string { return CodeFenced }

// Retryable reports whether a scheduler call's error (local, or from a node over rpc) says
// the same call may be sent again: CodeRetry, CodeUnconfirmed or CodeFenced. An error that
// is not retryable either refused the call for good (bad arguments, a name in use, the wrong
// phase) or comes from the transport (the caller decides: the node may be down).
func Retryable(err error) bool {
	switch rpc.CodeOf(err) {
	case CodeRetry, CodeUnconfirmed, CodeFenced:
		return true
	}
	return false
}

// Unconfirmed reports whether a change's error leaves it undecided: it may or may not take
// effect (CodeUnconfirmed).
func Unconfirmed(err error) bool { return rpc.CodeOf(err) == CodeUnconfirmed }

// IsNoJob reports whether err says the job named does not exist (CodeNoJob).
func IsNoJob(err error) bool { return rpc.CodeOf(err) == CodeNoJob }

var _ rpc.Coded = (*FencedError)(nil)
