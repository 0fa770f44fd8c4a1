#!/usr/bin/env bash
# The status-read figures of docs/benchmarks/cluster-speed.md ("Status
# reads"): natsd, one coordinator (`coordinator serve`) and NODES nodes as
# separate processes on loopback; a layered DAG of no-op tasks (LAYERS ×
# WIDTH, internal/flowgen.Layered) run to its end with `submit --wait`, then
# READS status reads of that finished run, each form timed: the wall of the
# whole batch (curl) and the CPU the coordinator process spent on it
# (utime+stime from /proc, so the client's decoding is not counted), and
# each request's own time as curl measures it (time_total: connect to last
# byte, without curl's start). Then
# RUNS-1 more runs of the same flow, and the coordinator's memory holding RUNS
# finished runs: its RSS and the Go heap in use (its /metrics, read after a
# garbage collection the coordinator made on its own, at most 2 min apart).
#
#   bash scripts/bench-status.sh                       # 100 × 1,000 tasks, 20 reads, 20 runs
#   RUNS=1 READS=50 bash scripts/bench-status.sh       # reads only
#   COORD=path/to/coordinator bash scripts/bench-status.sh   # another build (a baseline)
#   BUSY=1 RUNS=1 bash scripts/bench-status.sh         # the reads while another run executes
#
# Target (issue "cluster speed"): a status read of a 100K-task run ≤ 50 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${LAYERS:-100}
width=${WIDTH:-1000}
nodes=${NODES:-1}
reads=${READS:-20}
runs=${RUNS:-20}
out=build/bench-status
mkdir -p "$out"
go build -o "$out/flowgen" ./internal/flowgen/cmd/flowgen
n=$((layers * width))
"$out/flowgen" -layers "$layers" -width "$width" -json >"$out/layered.json"
. scripts/lib/loopback.sh
loopback_up bench-status

submit() { # prints the run id; the run has ended when it returns
  local id
  id=$("$coordbin" submit --json --server "$api" "$out/layered.json" | sed 's/.*"id":"\([^"]*\)".*/\1/')
  for ((;;)); do
    curl -sf "$api/v1/runs/$id?view=summary" -o "$out/sum.json" 2>/dev/null || curl -sf "$api/v1/runs/$id" -o "$out/sum.json"
    grep -q '"state":"\(succeeded\|failed\|cancelled\)"' "$out/sum.json" && break
    sleep 1
  done
  echo "$id"
}
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "flow: $layers layers × $width tasks = $n tasks; $nodes node(s); coordinator $coordbin"
t0=$(cpu)
id=$(submit)
echo "run $id: $(grep -o '"state":"[a-z]*"' "$out/sum.json" | head -1); coordinator CPU for the whole run $(( ($(cpu) - t0) * 1000 / tck )) ms"
if [ -n "${BUSY:-}" ]; then # the reads under load: another run of the flow executing meanwhile
  "$coordbin" submit --json --server "$api" "$out/layered.json" >/dev/null
  echo "reads while another run of the flow executes (BUSY)"
fi
echo
echo "| read | bytes | wall ms a read (curl included) | request ms, median / max (curl's time_total) | coordinator CPU ms a read |"
echo "|---|---:|---:|---:|---:|"
form() { # label query
  local label=$1 q=$2 c0 c1 w0 w1 bytes
  curl -sf "$api/v1/runs/$id$q" -o "$out/read.json" || { echo "| $label | (not served) | | | |"; return; }
  bytes=$(wc -c <"$out/read.json")
  : >"$out/req.times"
  c0=$(cpu) w0=$(date +%s%N)
  for ((k = 0; k < reads; k++)); do curl -sf -w '%{time_total}\n' "$api/v1/runs/$id$q" -o /dev/null >>"$out/req.times"; done
  w1=$(date +%s%N) c1=$(cpu)
  req=$(sort -n "$out/req.times" | awk '{ a[NR] = $1 } END { printf "%.1f / %.1f", (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) * 1000, a[NR] * 1000 }')
  awk -v l="$label" -v b="$bytes" -v w=$((w1 - w0)) -v c=$((c1 - c0)) -v r="$reads" -v t="$tck" -v q="$req" \
    'BEGIN { printf "| %s | %d | %.1f | %s | %.1f |\n", l, b, w / 1e6 / r, q, c * 1000 / t / r }'
}
form "full (GET /v1/runs/{id})" ""
form "summary (?view=summary)" "?view=summary"
form "long-poll, changed (?view=summary&wait=10s&version=0)" "?view=summary&wait=10s&version=0"
form "delta, nothing new (?since=VERSION)" "?since=$(grep -o '"version":"[^"]*"' "$out/sum.json" | head -1 | cut -d'"' -f4)"
if [ "$runs" -gt 1 ]; then
  for ((r = 1; r < runs; r++)); do submit >/dev/null; done
  sleep 125 # the Go runtime collects at least every 2 min when idle
  rss=$(awk '/VmRSS/ { print $2 }' "/proc/$cpid/status")
  heap=$(curl -sf "$api/metrics" | awk '/^go_memstats_heap_inuse_bytes/ { print $2 }')
  echo
  echo "coordinator holding $runs finished $n-task runs: RSS $((rss / 1024)) MiB, Go heap in use $(awk -v h="$heap" 'BEGIN { printf "%.0f", h / 1048576 }') MiB"
fi
