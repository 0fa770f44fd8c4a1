package main

import (
	"runtime/metrics"
	"slices"
	"time"
)

// memSampler records the high-water marks of the Go runtime's heap in use
// (heap objects + unused heap spans, what runtime.MemStats calls HeapInuse)
// and of all memory the runtime holds from the OS (MemStats.Sys), read
// through runtime/metrics (which, unlike ReadMemStats, does not stop the
// world) every period. Owner: the caller of startMem; stop and join: stop.
type memSampler struct {
	stopc chan struct{}
	done  chan struct{}
	peak  memPeak
}

type memPeak struct {
	HeapInuse uint64 `json:"heap_inuse_bytes"`
	Sys       uint64 `json:"sys_bytes"`
}

var memNames = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/total:bytes",
}

func readMem(s []metrics.Sample) memPeak {
	metrics.Read(s)
	return memPeak{HeapInuse: s[0].Value.Uint64() + s[1].Value.Uint64(), Sys: s[2].Value.Uint64()}
}

func startMem(period time.Duration) *memSampler {
	m := &memSampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		s := make([]metrics.Sample, len(memNames))
		for i, n := range memNames {
			s[i].Name = n
		}
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			p := readMem(s)
			m.peak.HeapInuse = max(m.peak.HeapInuse, p.HeapInuse)
			m.peak.Sys = max(m.peak.Sys, p.Sys)
			select {
			case <-m.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// stop ends sampling (after one last sample) and returns the peaks.
func (m *memSampler) stop() memPeak {
	close(m.stopc)
	<-m.done
	return m.peak
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
