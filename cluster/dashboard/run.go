package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
)

// Counts tallies a run's tasks by state (the status API's own tally).
type Counts = proto.TaskCounts

// progress is the share of a run's tasks done or skipped.
func progress(c Counts) float64 {
	if c.Tasks == 0 {
		return 0
	}
	return float64(c.Done+c.Skipped) / float64(c.Tasks)
}

func tally(st proto.RunStatus) Counts {
	var c Counts
	for _, t := range st.Tasks {
		c.Add(t.State)
	}
	return c
}

// finalCounts caches the counts of ended runs.
type finalCounts struct {
	c Counts
}

// counts returns a run's task counts (cached once the run has ended).
func (d *Dashboard) counts(ctx context.Context, id string) (Counts, error) {
	d.mu.Lock()
	fc := d.final[id]
	d.mu.Unlock()
	if fc != nil {
		return fc.c, nil
	}
	info, ok := d.src.Run(id)
	if !ok {
		return Counts{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	var c Counts
	var state string
	if ps, ok := d.src.(ProgressSource); ok {
		p, err := ps.Progress(ctx, id)
		if err != nil {
			return Counts{}, err
		}
		c, state = p.Counts, p.State
	} else {
		st, err := d.src.Status(ctx, id)
		if err != nil {
			return Counts{}, err
		}
		c, state = tally(st), st.State
	}
	if proto.Finished(state) && info.Finished != nil && d.now().Sub(*info.Finished) > 2*time.Second {
		d.mu.Lock()
		d.final[id] = &finalCounts{c}
		d.mu.Unlock()
	}
	return c, nil
}

// Summary is a run page's header data (GET /ui/runs/{id}/summary.json and
// the "summary" events of /ui/runs/{id}/events).
type Summary struct {
	ID    string `json:"id"`
	Flow  string `json:"flow"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Params are the values the run's parameters took.
	Params    map[string]any `json:"params,omitempty"`
	Submitted time.Time      `json:"submitted"`
	Finished  *time.Time     `json:"finished,omitempty"`
	AgeMS     int64          `json:"age_ms"`
	Gen       uint64         `json:"gen"`
	Nodes     []string       `json:"nodes"`
	Counts
	Progress float64 `json:"progress"`
	Events   uint64  `json:"events"` // stream sequence read up to: changes whenever new events arrive
}

// summary reads a run's events and status; fresh asks for a status newer
// than the one a request less than minRefresh ago fetched.
func (d *Dashboard) summary(ctx context.Context, id string, fresh bool) (Summary, *runData, proto.RunStatus, error) {
	rd, err := d.run(ctx, id)
	if err != nil {
		return Summary{}, nil, proto.RunStatus{}, err
	}
	// The page asks for the summary, then the graph: one status serves both.
	rd.mu.Lock()
	st, stAt := rd.st, rd.stAt
	rd.mu.Unlock()
	if fresh || stAt.IsZero() || d.now().Sub(stAt) >= minRefresh {
		if st, err = d.src.Status(ctx, id); err != nil {
			return Summary{}, nil, proto.RunStatus{}, err
		}
		rd.mu.Lock()
		rd.st, rd.stAt = st, d.now()
		rd.mu.Unlock()
	}
	rd.mu.Lock()
	info, seq := rd.info, rd.seq
	rd.mu.Unlock()
	s := Summary{ID: info.ID, Flow: info.RunSummary.Flow, State: st.State, Error: st.Error, Params: st.Params, Submitted: info.Submitted,
		Finished: info.Finished, AgeMS: info.Age(d.now()).Milliseconds(), Gen: info.Gen, Events: seq}
	s.Nodes = slices.Compact(slices.Sorted(slices.Values(info.Assignment)))
	s.Counts = tally(st)
	s.Progress = progress(s.Counts)
	return s, rd, st, nil
}

// brief is summary for a caller that needs no table: from a
// ProgressSource's tallies, without reading the run's status.
func (d *Dashboard) brief(ctx context.Context, id string, fresh bool) (Summary, error) {
	ps, ok := d.src.(ProgressSource)
	if !ok {
		s, _, _, err := d.summary(ctx, id, fresh)
		return s, err
	}
	rd, err := d.run(ctx, id)
	if err != nil {
		return Summary{}, err
	}
	p, err := ps.Progress(ctx, id)
	if err != nil {
		return Summary{}, err
	}
	rd.mu.Lock()
	info, seq := rd.info, rd.seq
	rd.mu.Unlock()
	s := Summary{ID: info.ID, Flow: info.RunSummary.Flow, State: p.State, Error: p.Error, Params: p.Params, Submitted: info.Submitted,
		Finished: info.Finished, AgeMS: info.Age(d.now()).Milliseconds(), Gen: info.Gen, Events: seq}
	s.Nodes = slices.Compact(slices.Sorted(slices.Values(info.Assignment)))
	s.Counts = p.Counts
	s.Progress = progress(s.Counts)
	return s, nil
}

func (d *Dashboard) handleSummary(w http.ResponseWriter, r *http.Request) {
	s, err := d.brief(r.Context(), r.PathValue("id"), false)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}
