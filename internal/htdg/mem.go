package htdg

import (
	"runtime/metrics"
	"time"
)

// MemSampler records the high-water marks of the Go runtime's heap in use
// (heap objects + unused heap spans, what runtime.MemStats calls HeapInuse)
// and of all memory the runtime holds from the OS (MemStats.Sys), read
// through runtime/metrics (which, unlike ReadMemStats, does not stop the
// world) every period. Owner: the caller of StartMem; stop and join: Stop.
type MemSampler struct {
	stopc chan struct{}
	done  chan struct{}
	peak  MemPeak
}

// MemPeak is what a MemSampler saw at most.
type MemPeak struct {
	HeapInuse uint64 `json:"heap_inuse_bytes"`
	Sys       uint64 `json:"sys_bytes"`
}

var memNames = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/total:bytes",
}

func readMem(s []metrics.Sample) MemPeak {
	metrics.Read(s)
	return MemPeak{HeapInuse: s[0].Value.Uint64() + s[1].Value.Uint64(), Sys: s[2].Value.Uint64()}
}

// StartMem starts sampling every period.
func StartMem(period time.Duration) *MemSampler {
	m := &MemSampler{stopc: make(chan struct{}), done: make(chan struct{})}
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

// Stop ends sampling (after one last sample) and returns the peaks.
func (m *MemSampler) Stop() MemPeak {
	close(m.stopc)
	<-m.done
	return m.peak
}
