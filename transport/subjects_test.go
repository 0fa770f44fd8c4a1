package transport

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	for _, tc := range []struct {
		what, id string
		ok       bool
		msg      string
	}{
		{"run", "r-1_A", true, ""},
		{"node", "n1", true, ""},
		{"run", "ünïcode", true, ""},
		{"run", "", false, "run id is empty"},
		{"run", "a.b", false, `'.' at byte 1`},
		{"node", "a b", false, `' ' at byte 1`},
		{"node", "a*", false, `'*' at byte 1`},
		{"node", ">", false, `'>' at byte 0`},
		{"node", "a\tb", false, `'\t'`},
		{"node", "all", false, "reserved"},
		{"run", "all", true, ""},
		{"run", strings.Repeat("x", MaxIDLen+1), false, "limit 128"},
	} {
		err := ValidateID(tc.what, tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateID(%q, %q) = %v, want ok=%v", tc.what, tc.id, err, tc.ok)
			continue
		}
		if err != nil && (!errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), tc.msg)) {
			t.Errorf("ValidateID(%q, %q) = %q, want ErrInvalidID mentioning %q", tc.what, tc.id, err, tc.msg)
		}
	}
}

func TestSubjects(t *testing.T) {
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := must(SignalSubject("r1", "n2", "n1")); got != "hf.run.r1.node.n2.n1" {
		t.Errorf("SignalSubject = %q", got)
	}
	if got := must(RunSignalsFilter("r1")); got != "hf.run.r1.node.*.*" {
		t.Errorf("RunSignalsFilter = %q", got)
	}
	if got := must(NodeSignalsFilter("n2")); got != "hf.run.*.node.n2.*" {
		t.Errorf("NodeSignalsFilter = %q", got)
	}
	if got := must(EventSubject("r1", "n2")); got != "hf.evt.r1.n2" {
		t.Errorf("EventSubject = %q", got)
	}
	if got := must(RunEventsFilter("r1")); got != "hf.evt.r1.*" {
		t.Errorf("RunEventsFilter = %q", got)
	}
	if got := must(EventNoticeSubject("r1", "n2")); got != "hf.evn.r1.n2" {
		t.Errorf("EventNoticeSubject = %q", got)
	}
	if got := must(RunEventNoticesFilter("r1")); got != "hf.evn.r1.*" {
		t.Errorf("RunEventNoticesFilter = %q", got)
	}
	if got := NodeEventNoticesFilter("n1"); got != "hf.evn.*.n1" {
		t.Errorf("NodeEventNoticesFilter = %q", got)
	}
	if got := must(ControlSubject("n2")); got != "hf.ctl.n2" {
		t.Errorf("ControlSubject = %q", got)
	}
	for _, f := range []func() (string, error){
		func() (string, error) { return SignalSubject("r.1", "n", "m") },
		func() (string, error) { return SignalSubject("r", "", "m") },
		func() (string, error) { return SignalSubject("r", "n", "m.x") },
		func() (string, error) { return EventSubject("r", "n*") },
		func() (string, error) { return ControlSubject("all") },
		func() (string, error) { return RunSignalsFilter(">") },
	} {
		if _, err := f(); !errors.Is(err, ErrInvalidID) {
			t.Errorf("want ErrInvalidID, got %v", err)
		}
	}
	run, node, from, ok := parseSignalSubject("hf.run.r1.node.n2.n1")
	if !ok || run != "r1" || node != "n2" || from != "n1" {
		t.Errorf("parse = %q %q %q %v", run, node, from, ok)
	}
	if got := SignalsFromFilter("n1"); got != "hf.run.*.node.*.n1" {
		t.Errorf("SignalsFromFilter = %q", got)
	}
	if got := NodeEventsFilter("n1"); got != "hf.evt.*.n1" {
		t.Errorf("NodeEventsFilter = %q", got)
	}
	if got := eventSender("hf.evt.r1.n2"); got != "n2" {
		t.Errorf("eventSender = %q", got)
	}
	for _, bad := range []string{"hf.run.", "hf.run.r1", "hf.run.r1.nod.n2.n1", "hf.run.r1.node.n2", "hf.run.r1.node.n2.n1.x", "hf.evt.r.n", "x"} {
		if _, _, _, ok := parseSignalSubject(bad); ok {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}
