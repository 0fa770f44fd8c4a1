package gpu

import "fmt"

// guard runs f, turning a panic into an error.
func guard(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if e, ok := v.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", v)
			}
		}
	}()
	f()
	return nil
}

func callCapture(fn func(*Stream) error, s *Stream) (err error) {
	perr := guard(func() { err = fn(s) })
	if perr != nil {
		return fmt.Errorf("capture function panicked: %w", perr)
	}
	return err
}
