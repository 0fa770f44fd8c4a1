package nodesdk

import (
	"github.com/hetflow/hetflow/cluster/node"
	"github.com/prometheus/client_golang/prometheus"
)

// nodeCollector exposes node.Stats and the executor's scheduler counters as
// Prometheus metrics, read at scrape time.
type nodeCollector struct{ n *node.Node }

var (
	descRuns    = prometheus.NewDesc("hetflow_node_runs_active", "Runs the node holds now.", nil, nil)
	descTasks   = prometheus.NewDesc("hetflow_node_tasks_executed_total", "Function executions, retries included.", nil, nil)
	descAssign  = prometheus.NewDesc("hetflow_node_assignments_total", "Assignments taken (a re-sent one counts once).", nil, nil)
	descSignals = prometheus.NewDesc("hetflow_node_signals_total", "Cross-node signals by direction and fate.", []string{"kind"}, nil)
	descEvents  = prometheus.NewDesc("hetflow_node_events_published_total", "Task events stored in JetStream.", nil, nil)
	descDropped = prometheus.NewDesc("hetflow_messages_dropped_total", "Messages on the node's subjects dropped undecoded, by reason.", []string{"reason"}, nil)
	descReads   = prometheus.NewDesc("hetflow_node_record_reads_total", "Reads of runs' records (the durable Signal stream) beyond a run's start: \"readback\" after a reconnect or a slow consumer's drops, \"behind\" again while the record lacked a batch the early buffer evicted.", []string{"kind"}, nil)
	descClock   = prometheus.NewDesc("hetflow_node_counter_clock_off", "1 once the time-stamp counter strayed from the monotonic clock and activations are stamped by the wall clock for good (node.Stats.CounterClockOff); 0 also where the counter is never read (not amd64, a purego build, the counter not the clocksource, or Config.Now set).", nil, nil)
	descSched   = prometheus.NewDesc("hetflow_scheduler_total", "Scheduler counters per domain (see localexec/scheduler.go).", []string{"domain", "counter"}, nil)
)

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuns, descTasks, descAssign, descSignals, descEvents, descDropped, descReads, descClock, descSched} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.Stats()
	ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(s.RunsActive))
	ch <- prometheus.MustNewConstMetric(descTasks, prometheus.CounterValue, float64(s.TasksExecuted))
	ch <- prometheus.MustNewConstMetric(descAssign, prometheus.CounterValue, float64(s.Assignments))
	for k, v := range map[string]uint64{"sent": s.SignalsSent, "received": s.SignalsReceived, "duplicate": s.SignalsDuplicate,
		"fenced": s.SignalsFenced, "dropped": s.SignalsDropped, "replayed": s.SignalsReplayed,
		"early": s.SignalsEarly, "evicted": s.SignalsEvicted, "late": s.SignalsLate} {
		ch <- prometheus.MustNewConstMetric(descSignals, prometheus.CounterValue, float64(v), k)
	}
	ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(s.EventsPublished))
	for k, v := range map[string]uint64{"malformed": s.MessagesMalformed - s.MessagesOversized, "oversized": s.MessagesOversized,
		"mismatched": s.MessagesMismatched} {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(v), k)
	}
	ch <- prometheus.MustNewConstMetric(descReads, prometheus.CounterValue, float64(s.ReadBacks), "readback")
	ch <- prometheus.MustNewConstMetric(descReads, prometheus.CounterValue, float64(s.Rereads), "behind")
	clockOff := 0.0
	if s.CounterClockOff {
		clockOff = 1
	}
	ch <- prometheus.MustNewConstMetric(descClock, prometheus.GaugeValue, clockOff)
	for _, d := range c.n.Executor().Stats().Domains {
		for k, v := range map[string]uint64{"executed": d.Executed, "steal_attempts": d.StealAttempts,
			"failed_steals": d.FailedSteals, "parks": d.Parks, "wakeups": d.Wakeups} {
			ch <- prometheus.MustNewConstMetric(descSched, prometheus.CounterValue, float64(v), d.Domain, k)
		}
	}
}
