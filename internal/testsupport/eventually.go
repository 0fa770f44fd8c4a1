package testsupport

import (
	"context"
	"testing"
	"time"
)

// Polling backoff: the first check is immediate, then the pause doubles
// from minPause up to maxPause; it is never shorter than the last check
// took, up to maxCostPause, so that a costly condition (one that runs a
// command) leaves the machine at least half of the time.
const (
	minPause     = time.Millisecond
	maxPause     = 50 * time.Millisecond
	maxCostPause = 250 * time.Millisecond
)

// Eventually polls cond until it returns true, or fails the test with
// t.Fatalf once Scale(d) has passed (cond gets a last check after the
// deadline). It gives up at once if the test has already failed. Call it
// from the test's goroutine only.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	f := Factor()
	sd := scaleBy(d, f)
	start := time.Now()
	switch wait(t, time.Now().Add(sd), nil, func() (bool, string) { return cond(), "" }) {
	case met:
	case failed:
		t.Fatalf("gave up waiting for %s after %v: the test has already failed", what, time.Since(start).Round(time.Millisecond))
	case timedOut:
		t.Fatalf("timed out waiting for %s: not within %v (%v nominal × %s %g)",
			what, time.Since(start).Round(time.Millisecond), d, ScaleEnv, f)
	}
}

// EventuallyState is Eventually for a condition that also describes what it
// saw: the failure message quotes the last description.
func EventuallyState(t testing.TB, d time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	f := Factor()
	sd := scaleBy(d, f)
	start := time.Now()
	last := ""
	switch wait(t, time.Now().Add(sd), nil, func() (bool, string) {
		ok, s := cond()
		last = s
		return ok, s
	}) {
	case met:
	case failed:
		t.Fatalf("gave up waiting for %s after %v: the test has already failed; last: %s", what, time.Since(start).Round(time.Millisecond), last)
	case timedOut:
		t.Fatalf("timed out waiting for %s: not within %v (%v nominal × %s %g); last: %s",
			what, time.Since(start).Round(time.Millisecond), d, ScaleEnv, f, last)
	}
}

// EventuallyCtx polls cond until it returns true, or fails the test with
// t.Fatalf once ctx is done (cond gets a last check then). Give it a
// context from Context so that its deadline scales. Call it from the
// test's goroutine only.
func EventuallyCtx(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	switch wait(t, time.Time{}, ctx.Done(), func() (bool, string) { return cond(), "" }) {
	case met:
	case failed:
		t.Fatalf("gave up waiting for %s after %v: the test has already failed", what, time.Since(start).Round(time.Millisecond))
	case timedOut:
		t.Fatalf("timed out waiting for %s: gave up after %v (%v)", what, time.Since(start).Round(time.Millisecond), context.Cause(ctx))
	}
}

type outcome int

const (
	met      outcome = iota // cond held
	timedOut                // the deadline passed or done closed first
	failed                  // the test failed meanwhile
)

// wait polls cond until it holds, the deadline (if not zero) passes, done
// (if not nil) closes or the test fails. cond is always checked once more
// after the deadline or done.
func wait(t testing.TB, deadline time.Time, done <-chan struct{}, cond func() (bool, string)) outcome {
	pause := minPause
	for {
		t0 := time.Now()
		if ok, _ := cond(); ok {
			return met
		}
		cost := time.Since(t0)
		if t.Failed() {
			return failed
		}
		if over(deadline, done) {
			return timedOut
		}
		timer := time.NewTimer(max(pause, min(cost, maxCostPause)))
		select {
		case <-timer.C:
		case <-done:
			timer.Stop()
		}
		if pause *= 2; pause > maxPause {
			pause = maxPause
		}
	}
}

func over(deadline time.Time, done <-chan struct{}) bool {
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Context returns a context that expires after Scale(d) and is cancelled
// when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Scale(d))
	t.Cleanup(cancel)
	return ctx
}
