package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/localexec"
)

// A running cluster's nodes are read through their Prometheus /metrics
// (node --http; the coordinator's GET /v1/nodes gives each node's address
// from its memberlist metadata): counters before and after each run, and
// memory sampled while it runs.

// remoteNode is one alive node of a running cluster.
type remoteNode struct {
	id   string
	url  string // http://host:port, "" when the node runs without --http
	cpus int
}

// noHTTPNote is the note of a node that serves no metrics.
const noHTTPNote = "the node runs without --http: no counters or memory (start it with node --http HOST:PORT)"

// scraper reads the nodes' /metrics.
type scraper struct {
	client *http.Client
	token  string
}

// nodeScrape is one read of a node's /metrics.
type nodeScrape struct {
	c         NodeCounters
	rss, heap uint64
}

// scrape reads and parses url's /metrics.
func (s *scraper) scrape(ctx context.Context, n remoteNode) (nodeScrape, error) {
	out := nodeScrape{c: NodeCounters{Node: n.id}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url+"/metrics", nil)
	if err != nil {
		return out, fmt.Errorf("bench: node %s metrics at %s: %w", n.id, n.url, err)
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return out, fmt.Errorf("bench: node %s metrics: %w", n.id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return out, fmt.Errorf("bench: node %s metrics at %s: HTTP %d: %s", n.id, n.url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out, fmt.Errorf("bench: node %s metrics at %s: %w", n.id, n.url, err)
	}
	return parseNodeMetrics(n, fams), nil
}

// parseNodeMetrics picks the counters cmd/node exports (cmd/node/metrics.go)
// and the process's memory out of a scrape.
func parseNodeMetrics(n remoteNode, fams map[string]*dto.MetricFamily) nodeScrape {
	out := nodeScrape{c: NodeCounters{Node: n.id}}
	val := func(m *dto.Metric) uint64 {
		switch {
		case m.GetCounter() != nil:
			return uint64(m.GetCounter().GetValue())
		case m.GetGauge() != nil:
			return uint64(m.GetGauge().GetValue())
		case m.GetUntyped() != nil:
			return uint64(m.GetUntyped().GetValue())
		}
		return 0
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	each := func(name string, fn func(*dto.Metric)) {
		if f := fams[name]; f != nil {
			for _, m := range f.GetMetric() {
				fn(m)
			}
		}
	}
	each("hetflow_node_tasks_executed_total", func(m *dto.Metric) { out.c.TasksExecuted = val(m) })
	each("hetflow_node_assignments_total", func(m *dto.Metric) { out.c.Assignments = val(m) })
	each("hetflow_node_events_published_total", func(m *dto.Metric) { out.c.EventsPublished = val(m) })
	each("hetflow_node_signals_total", func(m *dto.Metric) {
		switch label(m, "kind") {
		case "sent":
			out.c.SignalsSent = val(m)
		case "received":
			out.c.SignalsReceived = val(m)
		case "duplicate":
			out.c.SignalsDup = val(m)
		}
	})
	doms := map[string]*localexec.DomainStats{}
	each("hetflow_scheduler_total", func(m *dto.Metric) {
		name := label(m, "domain")
		d := doms[name]
		if d == nil {
			d = &localexec.DomainStats{Domain: name}
			if name == "cpu" {
				d.Workers = n.cpus
			}
			doms[name] = d
		}
		switch label(m, "counter") {
		case "executed":
			d.Executed = val(m)
		case "steal_attempts":
			d.StealAttempts = val(m)
		case "failed_steals":
			d.FailedSteals = val(m)
		case "parks":
			d.Parks = val(m)
		case "wakeups":
			d.Wakeups = val(m)
		}
	})
	for _, name := range slices.Sorted(maps.Keys(doms)) {
		out.c.Domains = append(out.c.Domains, *doms[name])
	}
	each("process_resident_memory_bytes", func(m *dto.Metric) { out.rss = val(m) })
	each("go_memstats_heap_inuse_bytes", func(m *dto.Metric) { out.heap = val(m) })
	return out
}

// remoteSnapshot reads every node's counters; a node without --http, or
// whose scrape failed, gets a note instead.
func (t *target) remoteSnapshot(ctx context.Context) snapshot {
	s := make(snapshot, len(t.remote))
	for i, n := range t.remote {
		s[i] = NodeCounters{Node: n.id, Note: noHTTPNote}
		if n.url == "" {
			continue
		}
		r, err := t.scraper.scrape(ctx, n)
		if err != nil {
			s[i].Note = err.Error()
			continue
		}
		s[i] = r.c
	}
	return s
}

// memSampler samples the nodes' memory while runs go on: the owner starts
// it, Stop ends its goroutine and joins it.
type memSampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak map[string][2]uint64 // node -> peak RSS, peak heap in use
}

// remoteMem starts sampling every node with an HTTP address each interval.
func (t *target) remoteMem(ctx context.Context, interval time.Duration) *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{}), peak: map[string][2]uint64{}}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		sample := func() {
			for _, n := range t.remote {
				if n.url == "" {
					continue
				}
				if r, err := t.scraper.scrape(ctx, n); err == nil {
					m.mu.Lock()
					p := m.peak[n.id]
					m.peak[n.id] = [2]uint64{max(p[0], r.rss), max(p[1], r.heap)}
					m.mu.Unlock()
				}
			}
		}
		for {
			sample()
			select {
			case <-m.stop:
				sample()
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

// Stop ends the sampling (after one last sample, taken before it returns)
// and gives each node's peaks.
func (m *memSampler) Stop() map[string][2]uint64 {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// remoteNodes lists the alive nodes of ns, by id.
func remoteNodes(ns []proto.NodeInfo) []remoteNode {
	var out []remoteNode
	for _, n := range ns {
		if n.State != proto.NodeAlive {
			continue
		}
		u := n.HTTP
		if u != "" && !strings.Contains(u, "://") {
			u = "http://" + u
		}
		out = append(out, remoteNode{id: n.ID, url: u, cpus: n.CPUs})
	}
	slices.SortFunc(out, func(a, b remoteNode) int { return strings.Compare(a.id, b.id) })
	return out
}
