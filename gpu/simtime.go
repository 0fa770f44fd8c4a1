//go:build !cuda

package gpu

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// The timed sim (SimProfileEnv set): device operations still run their Go bodies, but each
// also gets a modelled start and end on a virtual timeline, and the host is held back so that
// wall time follows the model.
//
//   - A device has three engines, each one timeline: compute (kernels, memsets, device-to-device
//     copies), host-to-device copy and device-to-host copy. An operation starts at the later of
//     the time it is ready (its predecessors' ends, its stream's previous operation, the host's
//     submission plus LaunchLatency) and the time its engine is free; it ends at the later of
//     start + its modelled time (Profile) and the wall time its body finished.
//   - Every host goroutine that waits on a device (Graph.Launch, Stream.Synchronize,
//     Event.Synchronize, Buffer.Write and Read) has a virtual clock of its own: the model's end
//     of what it waited for. It stands for the host thread, which is blocked until then on
//     hardware; what it submits next is ready no earlier. The goroutine really sleeps (a timer;
//     nothing spins) only when its clock is more than the profile's Slack ahead of wall time,
//     and then until about its clock (the timer's lateness, learnt as it goes, is taken off).
//     Goroutines are told apart by their id (runtime.Stack), as the model's host threads.
//
// What this leaves out, in the model's favour or not, is written in docs/benchmarks/timed-sim.md.

// simClock is wall time for the model; tests inject a fake one.
type simClock interface {
	now() time.Duration    // since a fixed origin
	sleep(d time.Duration) // block for about d, on a timer
}

type realClock struct{}

var clockOrigin = time.Now()

func (realClock) now() time.Duration    { return time.Since(clockOrigin) }
func (realClock) sleep(d time.Duration) { time.Sleep(d) }

// simWorld is what the devices of a process share in the model: wall time and the host
// goroutines' virtual clocks.
type simWorld struct {
	clk  simClock
	goid func() uint64

	mu    sync.Mutex
	hosts map[uint64]time.Duration // goroutine → virtual time it is blocked until (> wall)
	late  time.Duration            // running estimate of how late a sleep wakes
}

var defaultWorld = &simWorld{clk: realClock{}, goid: curGoid, hosts: map[uint64]time.Duration{}}

func curGoid() uint64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	s := bytes.TrimPrefix(b[:n], []byte("goroutine "))
	if i := bytes.IndexByte(s, ' '); i > 0 {
		if v, err := strconv.ParseUint(string(s[:i]), 10, 64); err == nil {
			return v
		}
	}
	return 0
}

// hostNow is the calling goroutine's virtual time: its clock, or wall time if that is later.
func (w *simWorld) hostNow() time.Duration {
	id := w.goid()
	now := w.clk.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.hosts[id]; ok {
		if h > now {
			return h
		}
		delete(w.hosts, id)
	}
	return now
}

// hostWait makes the calling goroutine wait, in the model, until t: its clock moves to t (if
// later), and it sleeps only if that puts it more than slack ahead of wall time.
func (w *simWorld) hostWait(t, slack time.Duration, st *SimStats, stmu *sync.Mutex) {
	id := w.goid()
	now := w.clk.now()
	w.mu.Lock()
	h := max(w.hosts[id], t)
	lead := h - now
	if lead <= 0 {
		delete(w.hosts, id)
		w.mu.Unlock()
		stmu.Lock()
		st.Syncs++
		stmu.Unlock()
		return
	}
	w.hosts[id] = h
	if len(w.hosts) > 256 { // goroutines that left: their clocks are in the past
		for g, v := range w.hosts {
			if v <= now {
				delete(w.hosts, g)
			}
		}
	}
	late := w.late
	w.mu.Unlock()
	if lead <= slack {
		stmu.Lock()
		st.Syncs++
		stmu.Unlock()
		return
	}
	d := max(lead-late, 0)
	w.clk.sleep(d)
	after := w.clk.now()
	w.mu.Lock()
	w.late = (4*w.late + max(after-now-d, 0)) / 5
	if w.hosts[id] <= after {
		delete(w.hosts, id)
	}
	w.mu.Unlock()
	stmu.Lock()
	st.Syncs++
	st.Sleeps++
	st.Slept += after - now
	st.Late += max(after-h, 0)
	stmu.Unlock()
}

// settle sleeps until wall time reaches t, give or take the timer's lateness.
func (w *simWorld) settle(t time.Duration) {
	w.mu.Lock()
	late := w.late
	w.mu.Unlock()
	if lead := t - w.clk.now(); lead > late {
		w.clk.sleep(lead - late)
	}
}

// simTiming is a timed device's model: its profile, its engines' timelines, its counters.
type simTiming struct {
	w *simWorld
	p Profile

	mu   sync.Mutex
	free [numEngines]time.Duration // when each engine's last booked operation ends
	st   SimStats
}

func newSimTiming(w *simWorld, p Profile) *simTiming {
	t := &simTiming{w: w, p: p}
	t.st.Profile = p.Name
	return t
}

// submitAt is when work the calling goroutine submits now can start on the device.
func (t *simTiming) submitAt() time.Duration { return t.w.hostNow() + t.p.LaunchLatency }

func (t *simTiming) hostWait(end time.Duration) { t.w.hostWait(end, t.p.slack(), &t.st, &t.mu) }

// cost is o's modelled time; declared is false for a kernel without Work (its body's time is
// added to the overhead).
func (t *simTiming) cost(o *op) (d time.Duration, declared bool, err error) {
	if o.kind != KindKernel {
		return t.p.CopyTime(o.kind, o.bytes), true, nil
	}
	if o.k.Work == nil {
		return t.p.KernelOverhead, false, nil
	}
	var w Work
	if err := guard(func() { w = o.k.Work(o.grid, o.block, o.args) }); err != nil {
		return 0, false, fmt.Errorf("%w: %s: its Work function: %w", ErrKernel, o.k.Name, err)
	}
	if w.Bytes < 0 || w.Flops < 0 {
		return 0, false, fmt.Errorf("%w: %s: its Work function returned %+v", ErrKernel, o.k.Name, w)
	}
	return t.p.KernelTime(w), true, nil
}

// book reserves engine e from max(ready, free) for d and returns the start.
func (t *simTiming) book(e int, ready, d time.Duration) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := max(ready, t.free[e])
	t.free[e] = start + d
	return start
}

// finish records an operation booked at start on e that ends at end, its body having taken body.
func (t *simTiming) finish(e int, start, end, body time.Duration, bodyBound bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.free[e] = max(t.free[e], end)
	t.st.Ops++
	t.st.Modeled += end - start
	t.st.Busy[e] += end - start
	t.st.Body += body
	if bodyBound {
		t.st.BodyBound++
	}
}

// idleAt is when the last operation booked on any engine ends.
func (t *simTiming) idleAt() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(t.free[0], t.free[1], t.free[2])
}

func (t *simTiming) stats() SimStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// execTimed runs o (a capture: its recorded operations in order) ready at ready and returns
// its modelled end.
func (d *Device) execTimed(o *op, rec []*op, ready time.Duration) (time.Duration, error) {
	t := d.tm
	if o.kind == KindCapture {
		at := ready
		for j, c := range rec {
			end, err := d.execTimed(c, nil, at)
			if err != nil {
				return at, fmt.Errorf("captured operation %d (%v): %w", j, c, err)
			}
			at = end
		}
		return at, nil
	}
	dur, declared, err := t.cost(o)
	if err != nil {
		return ready, err
	}
	e := engineOf(o.kind)
	start := t.book(e, ready, dur)
	w0 := t.w.clk.now()
	err = d.exec(o, nil)
	w1 := t.w.clk.now()
	end := start + dur
	if !declared {
		end += w1 - w0
	}
	bodyBound := w1 > end
	end = max(end, w1)
	t.finish(e, start, end, w1-w0, bodyBound)
	return end, err
}

// syncCopy is Buffer.Write or Read on a timed device: a copy the calling goroutine waits for.
func (d *Device) syncCopy(kind NodeKind, bytes int, body func() error) error {
	o := &op{kind: kind, dev: d, bytes: bytes}
	t := d.tm
	dur, _, _ := t.cost(o)
	e := engineOf(kind)
	start := t.book(e, t.submitAt(), dur)
	w0 := t.w.clk.now()
	err := body()
	w1 := t.w.clk.now()
	end := max(start+dur, w1)
	t.finish(e, start, end, w1-w0, w1 > start+dur)
	t.hostWait(end)
	return err
}

// SimStats are d's timed-sim counters (zero on the plain sim).
func (d *Device) SimStats() SimStats {
	if d.tm == nil {
		return SimStats{}
	}
	return d.tm.stats()
}

// SimProfile is the profile of a timed sim device, nil for a plain sim device.
func (d *Device) SimProfile() *Profile {
	if d.tm == nil {
		return nil
	}
	p := d.tm.p
	return &p
}

// SettleModel waits (asleep, on a timer) until wall time reaches the modelled end of all work
// booked so far on the timed devices among devs, give or take the timer's lateness; a harness
// calls it after a run so that the run's wall time includes the model's tail. It returns at
// once for plain sim devices.
func SettleModel(devs ...*Device) {
	var w *simWorld
	var t time.Duration
	for _, d := range devs {
		if d != nil && d.tm != nil {
			w = d.tm.w
			t = max(t, d.tm.idleAt())
		}
	}
	if w != nil {
		w.settle(t)
	}
}
