#!/usr/bin/env bash
# The size sweep of docs/benchmarks/cluster-speed.md ("Per-task cost from
# 10K to 1M tasks"): layered DAGs of no-op tasks (internal/flowgen.Layered,
# WIDTH tasks a layer, each after 2 random tasks of the layer before; the
# width stays, the layers grow) at each size of SIZES (in thousands of
# tasks), run whole through `coordinator dev --nodes NODES` and read by
# `coordinator validate`, each under /usr/bin/time: wall, CPU (user+sys)
# and peak RSS of the whole command; ROUNDS rounds; prints a markdown table
# of medians with the CPU and the RSS a task.
#
# SHAPE=flat (the default) writes one flat layered DAG a size: its
# canonical JSON is ~125 bytes a task, so a flow file (spec.MaxFileSize,
# 32 MiB) holds at most ~250K tasks. SHAPE=modules writes every size as a
# chain of N / (BLOCK × WIDTH) module tasks over one layered block of BLOCK
# layers (flowgen.LayeredModules; default 10 layers, 10K tasks): the same
# file at every size, 1M tasks from 600 KB.
#
#   bash scripts/bench-sweep.sh                               # flat: 10K, 30K, 100K, 200K
#   SHAPE=modules SIZES="10 100 1000" bash scripts/bench-sweep.sh   # to 1M tasks (minutes, GiBs)
#   PROFILE=1 SIZES=200 bash scripts/bench-sweep.sh           # + CPU and heap profiles of dev
#
# Never part of .ci/run: the large points take minutes and gigabytes. The
# issue's target: the per-task cost flat in N (nothing O(N²) in a run).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/median.sh
sizes=${SIZES:-10 30 100 200}
shape=${SHAPE:-flat}
block=${BLOCK:-10}
width=${WIDTH:-1000}
nodes=${NODES:-3}
rounds=${ROUNDS:-1}
format=${FORMAT:-json}
out=build/bench-sweep
mkdir -p "$out"
coordbin=${COORD:-$out/coordinator}
[ -n "${COORD:-}" ] || go build -o "$out/coordinator" ./cmd/coordinator
go build -o "$out/flowgen" ./internal/flowgen/cmd/flowgen
jflag=()
[ "$format" = json ] && jflag=(-json)
measure() { # label n command...: appends "label n wall cpu rss_kib" to $out/times
  local label=$1 n=$2
  shift 2
  if ! /usr/bin/time -f '%e %U %S %M' -o "$out/last.time" "$@" >/dev/null 2>"$out/last.err"; then
    echo "bench-sweep: $label at $n tasks failed:" >&2
    tail -20 "$out/last.err" >&2
    exit 1
  fi
  awk -v l="$label" -v n="$n" '{ printf "%s %d %s %.3f %d\n", l, n, $1, $2 + $3, $4 }' "$out/last.time" >>"$out/times"
}
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "flows: layered ($shape$([ "$shape" = modules ] && echo ", blocks of $block layers")), width $width, $format; dev --nodes $nodes; $rounds round(s); coordinator $coordbin"
: >"$out/times"
for k in $sizes; do
  n=$((k * 1000))
  f=$out/$shape-$k.$format
  case $shape in
  flat) [ -s "$f" ] || "$out/flowgen" -layers $((n / width)) -width "$width" "${jflag[@]}" >"$f" ;;
  modules) [ -s "$f" ] || "$out/flowgen" -modules $((n / width / block)) -layers "$block" -width "$width" "${jflag[@]}" >"$f" ;;
  *) echo "bench-sweep: SHAPE is flat or modules" >&2; exit 2 ;;
  esac
  lim=(--max-tasks $((n + n / 100)) --max-flow-bytes $((1 << 30))) # + module vertices
  for ((r = 0; r < rounds; r++)); do
    prof=()
    if [ -n "${PROFILE:-}" ]; then
      prof=(--cpuprofile "$out/dev-$shape-$k-$r.cpu" --memprofile "$out/dev-$shape-$k-$r.heap")
    fi
    measure validate "$n" "$coordbin" validate "$f"
    measure dev "$n" "$coordbin" dev --nodes "$nodes" --sim-gpus 0 "${lim[@]}" "${prof[@]}" "$f"
    echo "  $n tasks, round $r: $(tail -2 "$out/times" | tr '\n' ' ')(load $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
awk "$median_awk"'
{ if (!($2 in seen)) { seen[$2] = 1; order[++m] = $2 }
  wall[$1, $2] = wall[$1, $2] " " $3; cpu[$1, $2] = cpu[$1, $2] " " $4; rss[$1, $2] = rss[$1, $2] " " $5 }
END {
  print "| tasks | validate wall / CPU s | validate CPU µs a task | dev wall / CPU s | dev CPU µs a task | beyond validate µs a task | dev CPU µs a task from the size before | dev peak RSS MiB | RSS KiB a task |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for (i = 1; i <= m; i++) {
    n = order[i]
    vc = median(cpu["validate", n]); dc = median(cpu["dev", n]); dr = median(rss["dev", n])
    marg = (i > 1) ? sprintf("%.1f", (dc - pc) * 1e6 / (n - pn)) : "—"
    printf "| %d | %.2f / %.2f | %.1f | %.2f / %.2f | %.1f | %.1f | %s | %.0f | %.2f |\n", n,
      median(wall["validate", n]), vc, vc * 1e6 / n, median(wall["dev", n]), dc, dc * 1e6 / n, (dc - vc) * 1e6 / n,
      marg, dr / 1024, dr / n
    pc = dc; pn = n
  }
}' "$out/times"
