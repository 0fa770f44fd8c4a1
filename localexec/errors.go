package localexec

import (
	"errors"
	"fmt"
)

var (
	// ErrCancelled is wrapped by the error of a run or Async call that was
	// cancelled (Future.Cancel) before it finished.
	ErrCancelled = errors.New("localexec: cancelled")
	// ErrClosed is returned for work submitted to a closed Executor.
	ErrClosed = errors.New("localexec: executor closed")
	// ErrModuleConflict is wrapped by the error of a run whose graph holds two
	// module tasks over one taskflow that no strong path orders, or a module
	// cycle.
	ErrModuleConflict = errors.New("localexec: module conflict")
	// ErrNoDevice is wrapped by the error of a run with a GPU task on a device
	// the executor does not have.
	ErrNoDevice = errors.New("localexec: no such GPU device")
	// ErrNoSource is wrapped by the error of a run whose graph (or a
	// module's or subflow's) has tasks but none without predecessors, so
	// that nothing could start.
	ErrNoSource = errors.New("localexec: no source task")
)

// PanicError is the error of a run in which a task panicked. Find it with
// errors.As.
type PanicError struct {
	Task  string // name of the task that panicked ("" if unnamed)
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("localexec: task %q panicked: %v", e.Task, e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// TaskError is the error of a run in which a task reported an error: a
// context task (EmplaceContext) returned one, or a GPU task's graph failed
// to launch.
type TaskError struct {
	Task string
	Err  error
}

func (e *TaskError) Error() string { return fmt.Sprintf("localexec: task %q: %v", e.Task, e.Err) }
func (e *TaskError) Unwrap() error { return e.Err }
