package gpu

// Stream operations shared by both backends. Copies are asynchronous: the host slice must stay
// untouched until the stream is synchronized (or, inside a capture, for the life of the graph).

// H2DAsync queues a copy of src to the first len(src) elements of dst.
func H2DAsync[T Elem](s *Stream, dst *Buffer[T], src []T) error {
	o, err := h2dOp(dst, src)
	if err != nil {
		return err
	}
	return s.submit(o)
}

// D2HAsync queues a copy of the first len(dst) elements of src to dst.
func D2HAsync[T Elem](s *Stream, dst []T, src *Buffer[T]) error {
	o, err := d2hOp(dst, src)
	if err != nil {
		return err
	}
	return s.submit(o)
}

// D2DAsync queues a copy of all of src to the start of dst.
func D2DAsync[T Elem](s *Stream, dst, src *Buffer[T]) error {
	o, err := d2dOp(dst, src)
	if err != nil {
		return err
	}
	return s.submit(o)
}

// MemsetAsync queues setting every element of dst to v (see Memset).
func MemsetAsync[T Elem](s *Stream, dst *Buffer[T], v T) error {
	o, err := memsetOp(dst, v)
	if err != nil {
		return err
	}
	return s.submit(o)
}

// Launch queues a kernel launch (arguments as for Graph.Kernel).
func (s *Stream) Launch(k *Kernel, grid, block Dim3, args ...any) error {
	o, err := kernelOp(s.dev, k, grid, block, args)
	if err != nil {
		return err
	}
	return s.submit(o)
}
