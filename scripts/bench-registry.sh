#!/usr/bin/env bash
# The "run again by flow id" figures of docs/benchmarks/cluster-speed.md ("A
# flow registry"): natsd, one coordinator (`coordinator serve`) and NODES
# nodes as separate processes on loopback; a layered DAG of no-op tasks
# (LAYERS × WIDTH, internal/flowgen.Layered, JSON) submitted once and run to
# its end (the coordinator has parsed it and stored it then), registered,
# then ROUNDS rounds of two runs of it, each followed to its end with
# --wait: the same file submitted again (`submit --wait F`), and the flow
# run by its id (`run --wait FLOWID`). For each, the CPU the coordinator
# process spent from the command's start to its end (utime+stime from
# /proc, so the client's and the nodes' CPU is not counted) and the
# command's wall; medians and ranges.
#
#   bash scripts/bench-registry.sh                        # 100 × 1,000 tasks, 1 node, 5 rounds
#   COORD=path/to/coordinator bash scripts/bench-registry.sh   # another build: one without
#                                                          # `register` does the submits alone (a baseline)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/median.sh
layers=${LAYERS:-100}
width=${WIDTH:-1000}
nodes=${NODES:-1}
rounds=${ROUNDS:-5}
out=build/bench-registry
mkdir -p "$out"
go build -o "$out/flowgen" ./internal/flowgen/cmd/flowgen
n=$((layers * width))
"$out/flowgen" -layers "$layers" -width "$width" -json >"$out/layered.json"
. scripts/lib/loopback.sh
loopback_up bench-registry

: >"$out/times"
measure() { # label command...: the run to its end; appends "label wall_s cpu_ms" to $out/times
  local label=$1 c0 c1 w0 w1
  shift
  c0=$(cpu) w0=$(date +%s%N)
  if ! "$@" >"$out/last.json" 2>"$out/last.err"; then
    echo "bench-registry: $label failed:" >&2
    tail -5 "$out/last.err" >&2
    exit 1
  fi
  w1=$(date +%s%N) c1=$(cpu)
  grep -q '"state": *"succeeded"' "$out/last.json" || { echo "bench-registry: $label: the run did not succeed" >&2; exit 1; }
  awk -v l="$label" -v w=$((w1 - w0)) -v c=$((c1 - c0)) -v t="$tck" 'BEGIN { printf "%s %.3f %.0f\n", l, w / 1e9, c * 1000 / t }' >>"$out/times"
}
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "flow: $layers layers × $width tasks = $n tasks, $(wc -c <"$out/layered.json") bytes of JSON; $nodes node(s); coordinator $coordbin"
measure first "$coordbin" submit --wait --json --server "$api" "$out/layered.json"
registered=
if "$coordbin" register --help >/dev/null 2>&1; then
  c0=$(cpu)
  fid=$("$coordbin" register --server "$api" "$out/layered.json")
  echo "register: flow $fid, coordinator CPU $(( ($(cpu) - c0) * 1000 / tck )) ms"
  registered=1
fi
for ((r = 0; r < rounds; r++)); do
  measure submit-again "$coordbin" submit --wait --json --server "$api" "$out/layered.json"
  [ -z "$registered" ] || measure run-by-id "$coordbin" run --wait --json --server "$api" "$fid"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
awk "$median_awk"'
{ if (!($1 in wall)) order[++n] = $1; wall[$1] = wall[$1] " " $2; cpu[$1] = cpu[$1] " " $3
  if (!($1 in lo) || $3 + 0 < lo[$1]) lo[$1] = $3; if (!($1 in hi) || $3 + 0 > hi[$1]) hi[$1] = $3; c[$1]++ }
END {
  print "| run | runs | coordinator CPU ms (median; range) | wall s (median) |"
  print "|---|---:|---:|---:|"
  for (i = 1; i <= n; i++) { l = order[i]; printf "| %s | %d | %.0f (%d–%d) | %.2f |\n", l, c[l], median(cpu[l]), lo[l], hi[l], median(wall[l]) }
}' "$out/times"
