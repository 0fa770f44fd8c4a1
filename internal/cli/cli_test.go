package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
)

func TestCodeOf(t *testing.T) {
	if CodeOf(nil, "") != nil {
		t.Fatal("CodeOf(nil) is not nil")
	}
	for _, tc := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("submit: %w", proto.ErrInvalid), ExitInvalid},
		{proto.ErrUnauthorized, ExitUnauthorized},
		{proto.ErrNotFound, ExitNotFound},
		{proto.ErrUnreachable, ExitUnreachable},
		{proto.ErrNoLeader, ExitUnreachable},
		{context.DeadlineExceeded, ExitUnreachable},
		{errors.New("run failed"), ExitRunFailed},
	} {
		var ee *ExitError
		err := CodeOf(tc.err, "give the token")
		if !errors.As(err, &ee) || ee.Code != tc.code || !errors.Is(err, tc.err) {
			t.Errorf("CodeOf(%v) = %v, want exit %d wrapping it", tc.err, err, tc.code)
		}
	}
	if err := CodeOf(proto.ErrUnauthorized, "give the token"); !strings.HasSuffix(err.Error(), "\n  give the token") {
		t.Errorf("unauthorised without its hint: %q", err)
	}
	if WithCode(ExitInvalid, nil) != nil {
		t.Error("WithCode(code, nil) is not nil")
	}
}

func TestShowOutput(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes of text
	for _, c := range []struct{ in, want string }{
		{"6 words\n", `"6 words\n"`},
		{"tab\tok", `"tab\tok"`},
		{"\x00\x01\x02", "000102"},
		{"\xff\xfe text", "fffe2074657874"},
		{strings.Repeat("\x01", 32), strings.Repeat("01", 32)},
		{strings.Repeat("\x01", 40), strings.Repeat("01", 32) + "… (40 bytes)"},
		{long, `"` + strings.Repeat("é", 40) + `"… (200 bytes)`},
	} {
		if got := ShowOutput(hex.EncodeToString([]byte(c.in))); got != c.want {
			t.Errorf("ShowOutput(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	if got := ShowOutput("zz"); got != "zz" {
		t.Errorf("not hex: %s", got)
	}
}

// PrintStatus's rows are what its format string printed them as (they are
// appended by hand): names padded by runes, long ones not cut, outputs.
func TestPrintStatusRows(t *testing.T) {
	st := proto.RunStatus{ID: "r1", Flow: "f", State: proto.RunSucceeded, Tasks: []proto.TaskStatus{
		{Name: "a", Node: "n1", State: "done", Activations: 1, Executions: 1},
		{Name: "modül/ünïcode", Node: "node-with-a-long-id", State: "failed", Activations: 123456, Executions: 7, Output: hex.EncodeToString([]byte("6 words\n"))},
		{Name: strings.Repeat("x", 30), State: "pending"},
	}}
	var got strings.Builder
	PrintStatus(&got, st)
	want := "run r1  flow f  succeeded\n"
	for _, ts := range st.Tasks {
		out := ""
		if ts.Output != "" {
			out = "  output " + ShowOutput(ts.Output)
		}
		want += fmt.Sprintf("  %-24s %-9s node %-6s activations %-5d executions %-5d%s\n", ts.Name, ts.State, ts.Node, ts.Activations, ts.Executions, out)
	}
	if got.String() != want {
		t.Fatalf("PrintStatus wrote\n%q\nwant\n%q", got.String(), want)
	}
}
