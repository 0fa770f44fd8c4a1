package main

import (
	"net"
	"testing"
)

// natsd speaks the CLI style of the other binaries: --help and --version
// exit 0, bad input exits 2, and health says whether a server answers.
func TestCommandLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "nats://" + ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, 0},
		{[]string{"--version"}, 0},
		{[]string{"health", "--help"}, 0},
		{[]string{}, 2},               // --store is required
		{[]string{"--nosuchflag"}, 2}, // cobra's own
		{[]string{"--store", t.TempDir(), "--addr", "nohostport"}, 2},
		{[]string{"health", "--server", down}, 1}, // nothing answers there
		{[]string{"health", "--url", down}, 1},    // the old flag still works
	} {
		if got := run(c.args); got != c.want {
			t.Errorf("natsd %v: exit %d, want %d", c.args, got, c.want)
		}
	}
}
