package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// submit --wait says the run id first; Ctrl-C detaches from the run (exit
// 130, saying how to follow or cancel it) and the run goes on.
func TestSubmitWaitDetachesOnInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	port := freePort(t)
	server := "http://" + addr(port)
	start(t, "dev", "coordinator", "dev", "--serve", "--nodes", "1", "--sim-gpus", "0", "--http", addr(port))
	testsupport.Eventually(t, 60*time.Second, "the dev cluster serving", func() bool {
		_, code := poll(t, "health", "--server", server)
		return code == 0
	})
	flow := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(flow, []byte("name: slow\ntasks:\n  - {name: nap, func: sleep, args: {ms: 120000}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "coordinator"), "submit", "--wait", "--server", server, flow)
	var out, errb bytes.Buffer
	var syncMu sync.Mutex
	cmd.Stdout, cmd.Stderr = &out, lockedBuf{&syncMu, &errb}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	stderrNow := func() string {
		syncMu.Lock()
		defer syncMu.Unlock()
		return errb.String()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("submit --wait stderr: %q", stderrNow())
		}
	})
	var id string
	testsupport.Eventually(t, 30*time.Second, "the run id on stderr before the run ends", func() bool {
		select {
		case <-exited:
			t.Fatalf("submit --wait ended before it was interrupted (%v): stdout %q, stderr %q", waitErr, out.String(), stderrNow())
		default:
		}
		syncMu.Lock()
		defer syncMu.Unlock()
		// The first line of its own (a retry notice may come before it).
		for _, line := range strings.Split(errb.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "run "); ok {
				id, _, _ = strings.Cut(rest, " ")
				break
			}
		}
		return id != ""
	})
	testsupport.Eventually(t, 30*time.Second, "the run running", func() bool {
		var st proto.RunStatus
		return getJSON(server+"/v1/runs/"+id, &st) && st.State == proto.RunRunning
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-exited
	code := 0
	if ee, ok := waitErr.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	syncMu.Lock()
	stderr := errb.String()
	syncMu.Unlock()
	if code != 130 || !strings.Contains(stderr, "detached from run "+id) || !strings.Contains(stderr, "coordinator cancel "+id) {
		t.Fatalf("after Ctrl-C: exit %d, stderr %q", code, stderr)
	}
	var st proto.RunStatus
	if !getJSON(server+"/v1/runs/"+id, &st) || st.State != proto.RunRunning {
		t.Fatalf("the run after the detach: %+v, want running", st)
	}
	if _, code := cli(t, "cancel", "--server", server, id); code != 0 {
		t.Fatalf("cancel: exit %d", code)
	}
}
