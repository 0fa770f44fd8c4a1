#!/usr/bin/env bash
# The cluster speed figures of docs/benchmarks/cluster-speed.md: a layered
# DAG of no-op tasks (LAYERS × WIDTH, each task after 2 random tasks of the
# layer before; internal/flowgen.Layered) run whole through
# `coordinator dev --nodes NODES`, against `coordinator validate` of the same
# file in the same round (the cost of reading the file at all). Both are
# timed as whole commands, wall and CPU (user+sys of the process and its
# children), ROUNDS rounds interleaved, YAML and JSON; prints a markdown
# table of medians and the median per-round ratios.
#
#   bash scripts/bench-cluster.sh                         # 100 × 1,000 on 3 nodes, 3 rounds
#   LAYERS=10 WIDTH=1000 ROUNDS=5 bash scripts/bench-cluster.sh
#
# Target (issue "run a flow at the speed of its graph"): dev within 3× of
# validate, and at most 10 µs of CPU a task beyond parsing the file.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/median.sh
layers=${LAYERS:-100}
width=${WIDTH:-1000}
nodes=${NODES:-3}
rounds=${ROUNDS:-3}
out=build/bench-cluster
mkdir -p "$out"
go build -o "$out/coordinator" ./cmd/coordinator
go build -o "$out/flowgen" ./internal/flowgen/cmd/flowgen
n=$((layers * width))
"$out/flowgen" -layers "$layers" -width "$width" >"$out/layered.yaml"
"$out/flowgen" -layers "$layers" -width "$width" -json >"$out/layered.json"
extra=()
if [ "$n" -gt 100000 ]; then
  extra=(--max-tasks "$n" --max-flow-bytes $((1 << 30)))
fi
TIMEFORMAT='%R %U %S'
measure() { # label command...: appends "label wall cpu" to $out/times
  local label=$1 t
  shift
  if ! t=$({ time "$@" >/dev/null 2>"$out/last.err"; } 2>&1); then
    echo "bench-cluster: $label failed:" >&2
    tail -20 "$out/last.err" >&2
    exit 1
  fi
  t=$(tail -1 <<<"$t")
  awk -v l="$label" '{ printf "%s %s %.3f\n", l, $1, $2 + $3 }' <<<"$t" >>"$out/times"
}
: >"$out/times"
for ((r = 0; r < rounds; r++)); do
  for f in yaml json; do
    measure "validate-$f" "$out/coordinator" validate "$out/layered.$f"
    measure "dev-$f" "$out/coordinator" dev --nodes "$nodes" "${extra[@]}" "$out/layered.$f"
  done
done
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "flow: $layers layers × $width tasks = $n tasks; dev --nodes $nodes; $rounds rounds"
echo
awk -v n="$n" "$median_awk"'
{ wall[$1] = wall[$1] " " $2; cpu[$1] = cpu[$1] " " $3; w[$1, ++c[$1]] = $2; u[$1, c[$1]] = $3 }
END {
  print "| format | validate wall / CPU s | dev wall / CPU s | dev ÷ validate (wall, CPU) | CPU µs a task beyond validate |"
  print "|---|---:|---:|---:|---:|"
  split("yaml json", fs, " ")
  for (k = 1; k <= 2; k++) {
    f = fs[k]; rw = ""; rc = ""; extra = ""
    for (i = 1; i <= c["dev-" f]; i++) {
      rw = rw " " w["dev-" f, i] / w["validate-" f, i]
      rc = rc " " u["dev-" f, i] / u["validate-" f, i]
      extra = extra " " (u["dev-" f, i] - u["validate-" f, i]) * 1e6 / n
    }
    printf "| %s | %.2f / %.2f | %.2f / %.2f | %.1f×, %.1f× | %.1f |\n", f, median(wall["validate-" f]), median(cpu["validate-" f]),
      median(wall["dev-" f]), median(cpu["dev-" f]), median(rw), median(rc), median(extra)
  }
}' "$out/times"
