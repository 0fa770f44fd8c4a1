//go:build !cuda

package gpu

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The timed sim (SimProfileEnv set): device operations still run their Go bodies, but each
// also gets a modelled start and end on a virtual timeline, and the host is held back so that
// wall time follows the model.
//
//   - A device has three engines, each one timeline: compute (kernels, memsets, device-to-device
//     copies), host-to-device copy and device-to-host copy. An operation starts at the later of
//     the time it is ready (its predecessors' ends, its stream's previous operation, the host's
//     submission plus LaunchLatency) and the earliest gap on its engine's timeline that fits
//     it (bookings are kept, so work ready earlier can go before work booked ahead of wall
//     time by a host thread whose clock runs ahead); it ends at the later of
//     start + its modelled time (Profile) and the wall time its body finished.
//   - A host thread that waits on a device (Graph.Launch, Stream.Synchronize,
//     Event.Synchronize, Buffer.Write and Read) is a Host with a clock of its own: the model's
//     end of what it waited for; it is blocked until then, as on hardware, and what it submits
//     next is ready no earlier. Its goroutine really sleeps (a timer; nothing spins) only when
//     that clock is more than the profile's Slack ahead of wall time, and then until about the
//     clock (the timer's lateness, learnt as it goes, is taken off). Graph.LaunchFrom names
//     the Host; other calls use the calling goroutine's, found by its id (runtime.Stack).
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

// simWorld is what the devices of a process share in the model: wall time, the Hosts of
// goroutines that wait on a device without one of their own, and how late sleeps wake.
type simWorld struct {
	clk  simClock
	goid func() uint64

	mu    sync.Mutex
	hosts map[uint64]*Host // by goroutine id; pruned of those not blocked
	late  atomic.Int64     // running estimate of how late a sleep wakes (ns)
}

// initialLate is where the estimate of a sleep's lateness starts: Go timers on a Linux VM were
// seen to wake about 1 ms late; the estimate follows what the sleeps show.
const initialLate = time.Millisecond

var defaultWorld = newSimWorld(realClock{}, curGoid, initialLate)

func newSimWorld(c simClock, goid func() uint64, late time.Duration) *simWorld {
	w := &simWorld{clk: c, goid: goid, hosts: map[uint64]*Host{}}
	w.late.Store(int64(late))
	return w
}

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

// host is the calling goroutine's own Host.
func (w *simWorld) host() *Host {
	id := w.goid()
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.hosts[id]
	if !ok {
		if len(w.hosts) >= 256 { // goroutines that left, or are not blocked
			now := int64(w.clk.now())
			for g, v := range w.hosts {
				if v.at.Load() <= now {
					delete(w.hosts, g)
				}
			}
		}
		h = NewHost()
		w.hosts[id] = h
	}
	return h
}

// hostNow is h's time in the model: when it is free, or wall time if that is later.
func (w *simWorld) hostNow(h *Host) time.Duration {
	return max(w.clk.now(), time.Duration(h.at.Load()))
}

// hostWait makes h wait, in the model, until t: its clock moves to t (if later), and its
// goroutine (the caller) sleeps only if that puts it more than slack ahead of wall time.
func (w *simWorld) hostWait(h *Host, t, slack time.Duration, st *SimStats, stmu *sync.Mutex) {
	now := w.clk.now()
	at := max(time.Duration(h.at.Load()), t)
	h.at.Store(int64(at))
	lead := at - now
	if lead <= slack {
		stmu.Lock()
		st.Syncs++
		stmu.Unlock()
		return
	}
	late := time.Duration(w.late.Load())
	d := max(lead-late, 0)
	w.clk.sleep(d)
	after := w.clk.now()
	w.late.Store(int64((4*late + max(after-now-d, 0)) / 5))
	stmu.Lock()
	st.Syncs++
	st.Sleeps++
	st.Slept += after - now
	st.Late += max(after-at, 0)
	stmu.Unlock()
}

// settle sleeps until wall time reaches t, give or take the timer's lateness.
func (w *simWorld) settle(t time.Duration) {
	late := time.Duration(w.late.Load())
	if lead := t - w.clk.now(); lead > late {
		w.clk.sleep(lead - late)
	}
}

// timelineHorizon is how far behind wall time an engine's timeline keeps its busy intervals:
// nothing is ready earlier than that (an operation is ready at or after its submission).
const timelineHorizon = 20 * time.Millisecond

// timeline is one engine's bookings: busy intervals, sorted, disjoint, touching ones merged.
// An operation takes the earliest gap at or after it is ready, so one that becomes ready
// before work another host thread booked ahead of wall time (that thread's clock runs ahead)
// runs first, as it would have on hardware.
type timeline struct{ iv []interval }

type interval struct{ s, e time.Duration }

func (tl *timeline) end() time.Duration {
	if len(tl.iv) == 0 {
		return 0
	}
	return tl.iv[len(tl.iv)-1].e
}

func (tl *timeline) book(ready, d time.Duration) time.Duration {
	i := sort.Search(len(tl.iv), func(i int) bool { return tl.iv[i].e > ready })
	start := ready
	for ; i < len(tl.iv) && tl.iv[i].s < start+d; i++ {
		start = max(start, tl.iv[i].e)
	}
	if d > 0 {
		tl.insert(i, interval{start, start + d})
	}
	return start
}

// insert puts n before tl.iv[i] (n starts after tl.iv[i-1] ends), merging what touches.
func (tl *timeline) insert(i int, n interval) {
	j := i
	if i > 0 && tl.iv[i-1].e >= n.s {
		j = i - 1
		tl.iv[j].e = max(tl.iv[j].e, n.e)
	} else {
		tl.iv = slices.Insert(tl.iv, i, n)
	}
	tl.mergeAfter(j)
}

func (tl *timeline) mergeAfter(j int) {
	k := j + 1
	for k < len(tl.iv) && tl.iv[k].s <= tl.iv[j].e {
		tl.iv[j].e = max(tl.iv[j].e, tl.iv[k].e)
		k++
	}
	tl.iv = slices.Delete(tl.iv, j+1, k)
}

// extend makes the booking that starts at start last until end (its body outlasted it).
func (tl *timeline) extend(start, end time.Duration) {
	i := sort.Search(len(tl.iv), func(i int) bool { return tl.iv[i].e > start })
	if i == len(tl.iv) || tl.iv[i].s > start {
		tl.insert(i, interval{start, end}) // a zero-length booking
		return
	}
	if end > tl.iv[i].e {
		tl.iv[i].e = end
		tl.mergeAfter(i)
	}
}

// prune forgets intervals that ended before horizon (in batches, to copy rarely).
func (tl *timeline) prune(horizon time.Duration) {
	if len(tl.iv) == 0 || tl.iv[0].e >= horizon {
		return
	}
	k := sort.Search(len(tl.iv), func(i int) bool { return tl.iv[i].e >= horizon })
	if k >= 64 || k == len(tl.iv) {
		tl.iv = slices.Delete(tl.iv, 0, k)
	}
}

// simTiming is a timed device's model: its profile, its engines' timelines, its counters.
type simTiming struct {
	w *simWorld
	p Profile

	mu  sync.Mutex
	eng [numEngines]timeline
	st  SimStats
}

func newSimTiming(w *simWorld, p Profile) *simTiming {
	t := &simTiming{w: w, p: p}
	t.st.Profile = p.Name
	return t
}

// submitAt is when work h submits now can start on the device.
func (t *simTiming) submitAt(h *Host) time.Duration { return t.w.hostNow(h) + t.p.LaunchLatency }

// hostWait is Graph.Launch's, Synchronize's, ... wait for end, by h.
func (t *simTiming) hostWait(h *Host, end time.Duration) {
	t.w.hostWait(h, end, t.p.slack(), &t.st, &t.mu)
}

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

// book reserves d of engine e in its earliest free gap at or after ready and returns the
// start.
func (t *simTiming) book(e int, ready, d time.Duration) time.Duration {
	horizon := t.w.clk.now() - timelineHorizon
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eng[e].prune(horizon)
	return t.eng[e].book(max(ready, horizon), d)
}

// finish records an operation booked at start on e that ends at end, its body having taken body.
func (t *simTiming) finish(e int, start, end, body time.Duration, bodyBound bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eng[e].extend(start, end)
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
	return max(t.eng[0].end(), t.eng[1].end(), t.eng[2].end())
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
	h := t.w.host()
	start := t.book(e, t.submitAt(h), dur)
	w0 := t.w.clk.now()
	err := body()
	w1 := t.w.clk.now()
	end := max(start+dur, w1)
	t.finish(e, start, end, w1-w0, w1 > start+dur)
	t.hostWait(h, end)
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
