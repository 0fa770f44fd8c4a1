package gpu

import (
	"fmt"
	"time"
)

// The engines of a timed sim device.
const (
	engCompute = iota
	engH2D
	engD2H
	numEngines
)

func engineOf(k NodeKind) int {
	switch k {
	case KindH2D:
		return engH2D
	case KindD2H:
		return engD2H
	}
	return engCompute
}

// SimStats are a timed sim device's model counters since it was opened (all zero, Profile
// empty, on the plain sim and on cuda).
type SimStats struct {
	Profile string `json:"profile,omitempty"`
	Ops     int64  `json:"ops"` // operations charged (a capture's operations one by one)
	// Modeled is the device time charged, summed over operations (end − start);
	// Body is the wall time their Go bodies took (copies included). Body/Modeled is the share
	// of the modelled time the sim spent on the CPU.
	Modeled time.Duration `json:"modeled_ns"`
	Body    time.Duration `json:"body_ns"`
	// BodyBound counts operations whose body outlasted their modelled time (they end at the
	// body's end).
	BodyBound int64 `json:"body_bound"`
	// Busy is each engine's charged time: compute, h2d, d2h.
	Busy [numEngines]time.Duration `json:"busy_ns"`
	// Host waits on the device: Syncs in all, Sleeps of them on a timer, Slept the wall time
	// asleep, Late the wall time the sleeps overshot the model by.
	Syncs  int64         `json:"syncs"`
	Sleeps int64         `json:"sleeps"`
	Slept  time.Duration `json:"slept_ns"`
	Late   time.Duration `json:"late_ns"`
}

// Add sums two devices' counters (Profile from s, or o if s has none).
func (s SimStats) Add(o SimStats) SimStats {
	if s.Profile == "" {
		s.Profile = o.Profile
	}
	s.Ops += o.Ops
	s.Modeled += o.Modeled
	s.Body += o.Body
	s.BodyBound += o.BodyBound
	for i := range s.Busy {
		s.Busy[i] += o.Busy[i]
	}
	s.Syncs += o.Syncs
	s.Sleeps += o.Sleeps
	s.Slept += o.Slept
	s.Late += o.Late
	return s
}

func (s SimStats) String() string {
	if s.Profile == "" {
		return "untimed sim"
	}
	share := 0.0
	if s.Modeled > 0 {
		share = float64(s.Body) / float64(s.Modeled)
	}
	return fmt.Sprintf("profile %s: %d ops, modeled %v (compute %v, h2d %v, d2h %v), bodies %v (%.0f%% of modeled, %d body-bound), %d host syncs, %d sleeps (%v asleep, %v past the model)",
		s.Profile, s.Ops, s.Modeled, s.Busy[engCompute], s.Busy[engH2D], s.Busy[engD2H], s.Body, 100*share, s.BodyBound, s.Syncs, s.Sleeps, s.Slept, s.Late)
}
