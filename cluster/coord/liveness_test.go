package coord

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLiveness runs the scenarios of testdata/liveness.txt against a
// Liveness. Lines (time in ms from a fixed epoch, set by "at"):
//
//	config silence=MS [inprocess] [nonats]  a new Liveness
//	at MS                            the clock
//	gossip ID STATE [BOOT]           memberlist says so
//	heard ID [refutes]               a sign of life over NATS (and whether it refutes gossip)
//	answered ID BOOT|- [refutes]     a ping's answer from the process of BOOT (-: it does not say)
//	noresp ID                        a ping found no responder
//	expect ID STATE                  the state to record
//	pings [ID...]                    exactly these nodes are due a ping now
//	next MS|none                     the next time the leader must look
func TestLiveness(t *testing.T) {
	f, err := os.Open("testdata/liveness.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var l *Liveness
	now := epoch
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Fields(line)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("liveness.txt:%d: %s: "+format, append([]any{ln, line}, args...)...)
		}
		ms := func(s string) time.Duration {
			v, err := strconv.Atoi(s)
			if err != nil {
				fail("not a number of ms: %q", s)
			}
			return time.Duration(v) * time.Millisecond
		}
		if w[0] != "config" && l == nil {
			fail("no config line yet")
		}
		switch w[0] {
		case "config":
			l, now = &Liveness{}, epoch
			for _, o := range w[1:] {
				switch {
				case strings.HasPrefix(o, "silence="):
					l.Silence = ms(strings.TrimPrefix(o, "silence="))
				case o == "inprocess":
					l.InProcess = true
				case o == "nonats":
					l.NoNATS = true
				default:
					fail("unknown option %q", o)
				}
			}
		case "at":
			now = epoch.Add(ms(w[1]))
		case "gossip":
			boot := ""
			if len(w) > 3 {
				boot = w[3]
			}
			l.Gossip(now, w[1], w[2], boot)
		case "heard":
			got := l.Heard(now, w[1])
			if want := len(w) > 2 && w[2] == "refutes"; got != want {
				fail("refutes = %v, want %v", got, want)
			}
		case "answered":
			boot := w[2]
			if boot == "-" { // an answer that does not say
				boot = ""
			}
			got := l.Answered(now, w[1], boot)
			if want := len(w) > 3 && w[3] == "refutes"; got != want {
				fail("refutes = %v, want %v", got, want)
			}
		case "noresp":
			l.NoResponder(now, w[1])
		case "expect":
			if got := l.State(now, w[1]); got != w[2] {
				fail("state %s, want %s", got, w[2])
			}
		case "pings":
			got := strings.Join(l.Pings(now), " ")
			if want := strings.Join(w[1:], " "); got != want {
				fail("pings [%s], want [%s]", got, want)
			}
		case "next":
			got := l.Next(now)
			switch {
			case w[1] == "none" && !got.IsZero():
				fail("next at %v, want none", got.Sub(epoch))
			case w[1] != "none" && !got.Equal(epoch.Add(ms(w[1]))):
				fail("next at %v, want %sms", got.Sub(epoch), w[1])
			}
		default:
			fail("unknown command")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
