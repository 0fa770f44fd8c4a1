package localexec

// DomainStats are one domain's scheduler counters, summed over its workers.
// See the essay at the top of scheduler.go for what they bound.
type DomainStats struct {
	Domain        string `json:"domain"` // "cpu", "gpu0", …
	Workers       int    `json:"workers"`
	Executed      uint64 `json:"executed"` // task bodies run
	StealAttempts uint64 `json:"steal_attempts"`
	FailedSteals  uint64 `json:"failed_steals"`      // steal attempts that found nothing (wasted steals)
	Parks         uint64 `json:"parks"`              // times a worker went to sleep
	Wakeups       uint64 `json:"wakeups"`            // notifications that reached a parked or parking worker
	Spins         uint64 `json:"spins"`              // spin episodes: times a worker became its domain's spinner (rule 1)
	Rechecks      uint64 `json:"rechecks"`           // last looks at every queue before a park (the barrier's re-check)
	Spinning      int    `json:"spinning,omitempty"` // workers spinning now
}

// Stats are the executor's scheduler counters.
type Stats struct {
	Domains []DomainStats
	// JoinResets counts the iterations of runs (Run, RunN, RunOpen…) of a
	// graph with join tasks (more than one strong predecessor) that began
	// by resetting every join counter; JoinResetsSkipped those that
	// skipped the pass, the taskflow's last run having proved every
	// counter restarted (a plain DAG run whole, neither cancelled nor
	// steered from outside: see Taskflow's sched.clean).
	JoinResets, JoinResetsSkipped uint64
}

// Total sums the counters over every domain.
func (s Stats) Total() DomainStats {
	t := DomainStats{Domain: "all"}
	for _, d := range s.Domains {
		t.Workers += d.Workers
		t.Executed += d.Executed
		t.StealAttempts += d.StealAttempts
		t.FailedSteals += d.FailedSteals
		t.Parks += d.Parks
		t.Wakeups += d.Wakeups
		t.Spins += d.Spins
		t.Rechecks += d.Rechecks
		t.Spinning += d.Spinning
	}
	return t
}

// Domain returns the stats of the named domain ("cpu", "gpu0", …).
func (s Stats) Domain(name string) DomainStats {
	for _, d := range s.Domains {
		if d.Domain == name {
			return d
		}
	}
	return DomainStats{Domain: name}
}

// Stats returns a snapshot of the scheduler's counters.
func (ex *Executor) Stats() Stats {
	s := Stats{JoinResets: ex.joinResets.Load(), JoinResetsSkipped: ex.joinSkips.Load()}
	for _, d := range ex.domains {
		ds := DomainStats{Domain: d.name, Workers: len(d.workers), Spinning: int(d.nSpinning.Load())}
		for _, w := range d.workers {
			ds.Executed += w.stats.executed.Load()
			ds.StealAttempts += w.stats.stealAttempts.Load()
			ds.FailedSteals += w.stats.failedSteals.Load()
			ds.Spins += w.stats.spins.Load()
			ds.Rechecks += w.stats.rechecks.Load()
			ds.Parks += w.stats.parks.Load()
			ds.Wakeups += w.stats.wakeups.Load()
		}
		s.Domains = append(s.Domains, ds)
	}
	return s
}
