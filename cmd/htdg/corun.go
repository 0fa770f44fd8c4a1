package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/hetflow/hetflow/internal/htdg"
)

// childEnv marks a process started by corun as a child; the test binary's
// TestMain looks for it (the real binary is told by --corun-child).
const childEnv = "HTDG_CORUN_CHILD"

// childResult is what a co-run child prints, one JSON line, when done.
type childResult struct {
	Mode    string  `json:"mode"`
	Tasks   int     `json:"tasks"`
	TotalS  float64 `json:"total_s"` // the timed runs together
	MedianS float64 `json:"median_s"`
	CPUS    float64 `json:"cpu_s"` // user+system CPU time of the timed runs
	MaxRSS  uint64  `json:"max_rss_bytes"`
}

// runChild is a co-run child: it builds and warms up its graph, says
// "ready", waits for a line on stdin, runs the timed runs and prints its
// childResult.
func runChild(n int, m mode, c benchConfig, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	var cpu0 time.Duration
	barrier := func() error {
		if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
			return err
		}
		if _, err := in.ReadString('\n'); err != nil {
			return fmt.Errorf("htdg: co-run child: waiting for the start signal: %w", err)
		}
		cpu0 = htdg.CPUTime()
		return nil
	}
	r, err := measure(n, m, c, barrier)
	if err != nil {
		return err
	}
	out := childResult{Mode: string(m), Tasks: n, MedianS: r.MedianS, CPUS: (htdg.CPUTime() - cpu0).Seconds(), MaxRSS: htdg.MaxRSS()}
	for _, s := range r.RunsS {
		out.TotalS += s
	}
	return json.NewEncoder(stdout).Encode(out)
}

// corunRow is k processes co-running one mode's graph.
type corunRow struct {
	Mode  string        `json:"mode"`
	K     int           `json:"k"`
	Procs []childResult `json:"procs"`
	// SoloS is the median run time of one process of the same mode run
	// alone just before this row (for k = 1, this row's own process).
	SoloS float64 `json:"solo_s"`
	// WeightedSpeedup is Σ over processes of SoloS / the process's median
	// run time. Medians, not totals: one run slowed by another program on
	// the machine moves a total more than a median; and the solo run is
	// measured next to the co-run because the machine's load drifts.
	WeightedSpeedup float64 `json:"weighted_speedup"`
}

type corunConfig struct {
	self  string // the executable to start
	n     int
	bench benchConfig
	maxK  int
	modes []mode
}

// corun, for k = 1…maxK and each mode, runs one process alone and then k
// processes at once, each the same n-task graph (started together once all
// are ready), and returns one row per (k, mode).
func corun(ctx context.Context, c corunConfig, progress io.Writer) ([]corunRow, error) {
	var rows []corunRow
	for k := 1; k <= c.maxK; k++ {
		for _, m := range c.modes {
			solo, err := corunOnce(ctx, c, m, 1)
			if err != nil {
				return rows, err
			}
			procs := solo
			if k > 1 {
				if procs, err = corunOnce(ctx, c, m, k); err != nil {
					return rows, err
				}
			}
			row := corunRow{Mode: string(m), K: k, Procs: procs, SoloS: solo[0].MedianS}
			for _, p := range procs {
				if p.MedianS > 0 {
					row.WeightedSpeedup += row.SoloS / p.MedianS
				}
			}
			rows = append(rows, row)
			if progress != nil {
				fmt.Fprintf(progress, "co-run %s k=%d: weighted speedup %.2f\n", m, k, row.WeightedSpeedup)
			}
		}
	}
	return rows, nil
}

type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
	reaped bool
}

// reap closes the child's stdin and waits for it (once).
func (ch *child) reap() {
	if !ch.reaped {
		ch.reaped = true
		_ = ch.stdin.Close()
		_ = ch.cmd.Wait()
	}
}

func corunOnce(ctx context.Context, c corunConfig, m mode, k int) ([]childResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	args := []string{"--corun-child", "--mode", string(m), "--n", strconv.Itoa(c.n),
		"--seed", strconv.FormatUint(c.bench.seed, 10), "--gpus", strconv.Itoa(c.bench.gpus),
		"--workers", strconv.Itoa(c.bench.workers), "--gpu-workers", strconv.Itoa(max(c.bench.gpuWorkers, 1)), "--reps", strconv.Itoa(c.bench.reps)}
	kids := make([]*child, 0, k)
	defer func() { // on every path: reap every child (cancel kills the stragglers)
		cancel()
		for _, ch := range kids {
			ch.reap()
		}
	}()
	fail := func(ch *child, what string, err error) error {
		cancel()
		ch.reap() // stderr is complete once Wait returns
		return fmt.Errorf("htdg: co-run %s k=%d: child %s: %w (stderr: %s)", m, k, what, err,
			strings.TrimSpace(ch.stderr.String()))
	}
	for range k {
		ch := &child{cmd: exec.CommandContext(ctx, c.self, args...)}
		ch.cmd.Env = append(os.Environ(), childEnv+"=1")
		ch.cmd.Stderr = &ch.stderr
		var err error
		if ch.stdin, err = ch.cmd.StdinPipe(); err != nil {
			return nil, err
		}
		out, err := ch.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		ch.stdout = bufio.NewReader(out)
		if err := ch.cmd.Start(); err != nil {
			return nil, fmt.Errorf("htdg: co-run: starting %s: %w", c.self, err)
		}
		kids = append(kids, ch)
	}
	for _, ch := range kids {
		line, err := ch.stdout.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			return nil, fail(ch, "not ready", fmt.Errorf("read %q: %v", line, err))
		}
	}
	for _, ch := range kids {
		if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
			return nil, fail(ch, "start signal", err)
		}
	}
	res := make([]childResult, k)
	for i, ch := range kids {
		line, err := ch.stdout.ReadString('\n')
		if err != nil {
			return nil, fail(ch, "result", err)
		}
		if err := json.Unmarshal([]byte(line), &res[i]); err != nil {
			return nil, fail(ch, "result", fmt.Errorf("decoding %q: %w", line, err))
		}
	}
	for _, ch := range kids {
		ch.reap()
		if ps := ch.cmd.ProcessState; ps == nil || !ps.Success() {
			return nil, fail(ch, "exit", fmt.Errorf("%v", ch.cmd.ProcessState))
		}
	}
	return res, nil
}
