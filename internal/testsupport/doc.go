// Package testsupport holds the helpers hetflow's tests share: one copy of
// each, so that a fix or a tuning made here reaches every package. Any
// package's tests may import it; it imports no project package but
// internal/natsembed (whose own in-package tests therefore cannot use it).
//
// # Deadlines: Scale and HETFLOW_TEST_TIMEOUT_SCALE
//
// A test states the nominal deadline it needs on an idle machine, and the
// helpers here stretch it with Scale. Scale multiplies a duration by the
// factor in the environment variable HETFLOW_TEST_TIMEOUT_SCALE (a positive
// number, fractions allowed: HETFLOW_TEST_TIMEOUT_SCALE=3 triples every
// deadline). Unset, the factor is 1, or 2 in a binary built with -race,
// whose checks slow everything down. This is the one knob for deadlines:
// to make the suite pass on a loaded machine (a CI host at load 10-20, a
// CPU hog beside it), set the variable, or change the defaults in this
// package; do not lengthen deadlines test by test.
//
//	HETFLOW_TEST_TIMEOUT_SCALE=4 go test -race ./cluster/...
//
// Scale only ever stretches what a test waits for before it gives up. A
// deadline that is itself the assertion (an election within 3 s, a context
// that must expire) is written in the test and not scaled.
//
// # Waiting for a condition: Eventually, EventuallyCtx, EventuallyState
//
// Eventually polls a condition, with a short backoff (1 ms, doubling up to
// 50 ms, and never less than the last check took, up to 250 ms, so that a
// condition that runs a command does not keep a core busy), until it holds
// or Scale(d) has passed; then it fails the test with t.Fatalf, naming
// what it waited for and how long:
//
//	testsupport.Eventually(t, 10*time.Second, "a leader", c.Leader)
//
// The condition is checked once more after the deadline has passed, so a
// test whose goroutine was not scheduled for a while on a busy machine is
// not failed without a last look. EventuallyCtx waits until a context is
// done instead (make it with Context, which scales); EventuallyState's
// condition also returns a description of what it saw, which the failure
// message quotes. All of them give up at once, without waiting out the
// deadline, when the test has already failed (a t.Errorf elsewhere).
//
// They call t.Fatalf, so, like t.FailNow, they must be called from the
// goroutine running the test (or benchmark or fuzz target), never from a
// goroutine it started.
//
// Context returns a context that expires after Scale(d) and is cancelled
// when the test ends: the context a test gives the calls it waits on.
//
// # A NATS server: NATS
//
// NATS starts a real in-process nats-server (internal/natsembed, the server
// of hetflow's dev mode) on a random loopback port, with JetStream on a
// file store in a temporary directory, and stops it when the test ends:
//
//	url := testsupport.NATS(t).URL()
//
// Options adjust the server (credentials, a token, a payload limit, no
// JetStream):
//
//	ns := testsupport.NATS(t, func(o *natsembed.Options) { o.Token = "tok" })
//
// The server can be stopped and started again, on the same port and store
// (its URL does not change), to test reconnection and what survives a
// restart: ns.Stop(), ns.Start(), ns.Restart().
//
// # Scenario files: Scenarios
//
// Scenarios runs a testdata file of cases (input lines, "----", the output
// they must produce, a blank line), the format of the pure state machines'
// scenario tests; with rewrite it writes the outputs got back into the
// file, for review:
//
//	testsupport.Scenarios(t, "testdata/leader_verdict.txt", *rewrite, func(at string, in []string) []string { … })
package testsupport
