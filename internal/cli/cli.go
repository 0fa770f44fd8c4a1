// Package cli is what the project's commands (cmd/coordinator, cmd/bench)
// share: the exit codes of the contract (docs/design.md, "The contract") and
// the mapping of a client's errors to them.
package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/hetflow/hetflow/cluster/proto"
)

// Exit codes of every command.
const (
	ExitOK           = 0 // success (submit --wait, dev: every run succeeded)
	ExitRunFailed    = 1 // a run failed or was cancelled
	ExitInvalid      = 2 // invalid input: flow file, arguments
	ExitUnreachable  = 3 // the cluster cannot be reached
	ExitUnauthorized = 4 // not authorised
	ExitNotFound     = 5 // no such run or node
)

// ExitError carries an exit code out of a command.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// WithCode gives err the exit code code; nil stays nil.
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: code, Err: err}
}

// CodeOf gives a client's error (proto's sentinels) its exit code; anything
// else is a failed run. An unauthorised error is followed by hint, the way
// to give the cluster's API token, on a line of its own.
func CodeOf(err error, hint string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proto.ErrInvalid):
		return WithCode(ExitInvalid, err)
	case errors.Is(err, proto.ErrUnauthorized):
		return WithCode(ExitUnauthorized, fmt.Errorf("%w\n  %s", err, hint))
	case errors.Is(err, proto.ErrNotFound):
		return WithCode(ExitNotFound, err)
	case errors.Is(err, proto.ErrUnreachable), errors.Is(err, proto.ErrNoLeader), errors.Is(err, context.DeadlineExceeded):
		return WithCode(ExitUnreachable, err)
	}
	return WithCode(ExitRunFailed, err)
}
