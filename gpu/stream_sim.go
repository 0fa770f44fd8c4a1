//go:build !cuda

package gpu

import (
	"fmt"
	"sync"
	"time"
)

// Stream is an ordered queue of device operations. On sim, a stream from Device.NewStream runs
// its operations in order on a goroutine of its own (owner: the device; stop: Destroy or
// Device.Close, which drain it first). The stream a capture node's function receives records
// instead of running.
type Stream struct {
	dev  *Device
	rec  *[]*op // capture mode
	live *liveStream
}

type streamItem struct {
	o      *op
	record *Event
	wait   *Event
	gen    uint64
	sync   chan syncReply
	at     time.Duration // timed sim: when the host submitted it, in the model
}

type syncReply struct {
	err error
	end time.Duration // timed sim: the stream's modelled end
}

type liveStream struct {
	mu     sync.Mutex
	cond   *sync.Cond
	q      []streamItem
	closed bool
	err    error // first failure since the last Synchronize
	done   chan struct{}
	vend   time.Duration // timed sim: modelled end of the last operation (loop goroutine only)
}

// NewStream starts a stream on d.
func (d *Device) NewStream() (*Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("%w: NewStream on device %d", ErrClosed, d.id)
	}
	ls := &liveStream{done: make(chan struct{})}
	ls.cond = sync.NewCond(&ls.mu)
	s := &Stream{dev: d, live: ls}
	d.streams[s] = struct{}{}
	go ls.loop(d)
	return s, nil
}

// Device is the stream's device.
func (s *Stream) Device() *Device { return s.dev }

// Destroy finishes the operations already queued and stops the stream. Idempotent; a
// capture stream cannot be destroyed.
func (s *Stream) Destroy() error {
	if s.live == nil {
		return fmt.Errorf("%w: Destroy of a capture stream", ErrCapture)
	}
	s.live.stop()
	s.dev.mu.Lock()
	delete(s.dev.streams, s)
	s.dev.mu.Unlock()
	return nil
}

func (ls *liveStream) stop() {
	ls.mu.Lock()
	if !ls.closed {
		ls.closed = true
		ls.cond.Broadcast()
	}
	ls.mu.Unlock()
	<-ls.done
}

func (ls *liveStream) loop(d *Device) {
	defer close(ls.done)
	ls.mu.Lock()
	for {
		for len(ls.q) == 0 && !ls.closed {
			ls.cond.Wait()
		}
		if len(ls.q) == 0 {
			ls.mu.Unlock()
			return
		}
		it := ls.q[0]
		ls.q[0] = streamItem{}
		ls.q = ls.q[1:]
		failed := ls.err != nil
		ls.mu.Unlock()

		var err error
		ready := max(it.at, ls.vend)
		switch {
		case it.o != nil:
			if !failed {
				if d.tm != nil {
					ls.vend, err = d.execTimed(it.o, nil, ready)
				} else {
					err = d.exec(it.o, nil)
				}
			}
		case it.record != nil:
			it.record.complete(it.gen, ready)
		case it.wait != nil:
			ls.vend = max(ls.vend, it.wait.await(it.gen))
		}

		ls.mu.Lock()
		if err != nil && ls.err == nil {
			ls.err = fmt.Errorf("gpu: stream operation %v: %w", it.o, err)
		}
		if it.sync != nil {
			it.sync <- syncReply{err: ls.err, end: ls.vend}
			ls.err = nil
		}
	}
}

func (s *Stream) enqueue(it streamItem) error {
	if tm := s.dev.tm; tm != nil {
		it.at = tm.w.hostNow(tm.w.host())
		if it.sync == nil {
			it.at += tm.p.LaunchLatency
		}
	}
	ls := s.live
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return fmt.Errorf("%w: stream of device %d", ErrClosed, s.dev.id)
	}
	ls.q = append(ls.q, it)
	ls.cond.Signal()
	return nil
}

func (s *Stream) submit(o *op) error {
	if o.dev != s.dev {
		return fmt.Errorf("%w: operation on device %d submitted to a stream of device %d", ErrDevice, o.dev.ID(), s.dev.ID())
	}
	if s.rec != nil {
		*s.rec = append(*s.rec, o)
		return nil
	}
	return s.enqueue(streamItem{o: o})
}

// Synchronize waits for every operation queued so far and returns the first error since the
// previous Synchronize (operations after a failure are skipped until it is reported).
func (s *Stream) Synchronize() error {
	if s.rec != nil {
		return fmt.Errorf("%w: Synchronize inside a capture", ErrCapture)
	}
	ch := make(chan syncReply, 1)
	if err := s.enqueue(streamItem{sync: ch}); err != nil {
		return err
	}
	r := <-ch
	if tm := s.dev.tm; tm != nil {
		tm.hostWait(tm.w.host(), r.end)
	}
	return r.err
}

// Record makes e complete when the work queued on s so far is done.
func (s *Stream) Record(e *Event) error {
	if s.rec != nil {
		return fmt.Errorf("%w: Record inside a capture", ErrCapture)
	}
	if e == nil || e.dev != s.dev {
		return fmt.Errorf("%w: Record of an event of another device (or nil)", ErrDevice)
	}
	e.mu.Lock()
	e.recorded++
	gen := e.recorded
	e.mu.Unlock()
	return s.enqueue(streamItem{record: e, gen: gen})
}

// Wait makes work queued on s after this call wait until e's latest Record (as of this call)
// has completed. Waiting on a never-recorded event waits for nothing, as in CUDA.
func (s *Stream) Wait(e *Event) error {
	if s.rec != nil {
		return fmt.Errorf("%w: Wait inside a capture", ErrCapture)
	}
	if e == nil || e.dev != s.dev {
		return fmt.Errorf("%w: Wait on an event of another device (or nil)", ErrDevice)
	}
	e.mu.Lock()
	gen := e.recorded
	e.mu.Unlock()
	return s.enqueue(streamItem{wait: e, gen: gen})
}

// Event marks a point in a stream, for ordering other streams (Stream.Wait) or the host
// (Event.Synchronize) after it.
type Event struct {
	dev       *Device
	mu        sync.Mutex
	cond      *sync.Cond
	recorded  uint64
	completed uint64
	closed    bool
	vdone     time.Duration // timed sim: modelled time of the latest completed Record
}

// NewEvent makes an event on d.
func (d *Device) NewEvent() (*Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("%w: NewEvent on device %d", ErrClosed, d.id)
	}
	e := &Event{dev: d}
	e.cond = sync.NewCond(&e.mu)
	d.events[e] = struct{}{}
	return e, nil
}

func (e *Event) complete(gen uint64, at time.Duration) {
	e.mu.Lock()
	if gen > e.completed {
		e.completed = gen
		e.vdone = at
	}
	e.cond.Broadcast()
	e.mu.Unlock()
}

// await blocks until Record number gen has completed and returns the modelled time of the
// latest completed Record (0 for gen 0: waiting on a never-recorded event waits for nothing).
func (e *Event) await(gen uint64) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.completed < gen && !e.closed {
		e.cond.Wait()
	}
	if gen == 0 {
		return 0
	}
	return e.vdone
}

func (e *Event) close() {
	e.mu.Lock()
	e.closed = true
	e.cond.Broadcast()
	e.mu.Unlock()
}

// Query reports whether the work before the latest Record has completed (on the timed sim:
// also in the model, as of the calling goroutine's time).
func (e *Event) Query() bool {
	var now time.Duration
	if tm := e.dev.tm; tm != nil {
		now = tm.w.hostNow(tm.w.host())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.completed >= e.recorded && e.vdone <= now
}

// Synchronize blocks until the work before the latest Record has completed.
func (e *Event) Synchronize() error {
	e.mu.Lock()
	gen := e.recorded
	e.mu.Unlock()
	at := e.await(gen)
	if tm := e.dev.tm; tm != nil {
		tm.hostWait(tm.w.host(), at)
	}
	return nil
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	e.dev.mu.Lock()
	delete(e.dev.events, e)
	e.dev.mu.Unlock()
	return nil
}
