#!/usr/bin/env bash
# The localexec figures of docs/benchmarks/localexec.md: every shape against
# its plain-Go baselines (run in the same process, one after the other, COUNT
# rounds): chan, and gofast with the first or the last ready successor run
# inline, the better of the two per round being "the best plain Go does";
# then building, Async and cpu/wall on a chain; then the rows compared with
# C++ Taskflow (issue 17): building 1M-task graphs, their first and second
# runs on a fresh executor, and 1M Async / SilentAsync calls, each in CPU
# ns (user+sys of the process) beside wall ns per task. Prints markdown
# tables of medians and of the median per-round ratio to each baseline, so
# a noisy machine moves both sides of a ratio together.
#
#   bash scripts/bench-localexec.sh            # COUNT=5 rounds (~3 min here)
#   COUNT=11 bash scripts/bench-localexec.sh   # steadier medians
#   RAW=out.txt bash scripts/bench-localexec.sh  # keep the raw go test output too
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
bin=$(mktemp -d)/localexec.test
raw=${RAW:-$(mktemp)}
go test -c -o "$bin" ./localexec/
run() { "$bin" -test.run '^$' -test.benchmem "$@" | grep '^Benchmark' >>"$raw"; }
: >"$raw"
for ((i = 0; i < count; i++)); do
  run -test.bench 'Chain1M|Independent1M|Tree20|Wavefront1000' -test.benchtime 3x
  run -test.bench 'CreateTask|AddEdge$' -test.benchtime 1000000x
  run -test.bench 'AddEdgeSparse|ChainWorkers' -test.benchtime 3x
  run -test.bench 'Async$' -test.benchtime 2x
  run -test.bench 'Phases|AsyncCPU' -test.benchtime 1x
done
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ), $count rounds"
awk '
function median(key,   n, i, j, t, a) {
  n = split(vals[key], a, " ")
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
  if (n == 0) return ""
  return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function metric(unit,   i) { for (i = 3; i <= NF; i++) if ($i == unit) return $(i - 1); return "" }
function add(key, v) { if (v != "") { vals[key] = vals[key] " " v; if (!(key in seen)) { seen[key] = 1; order[++norder] = key } } }
{
  name = $1; sub(/-[0-9]+$/, "", name)
  round[name]++
  ns = metric("ns/task"); if (ns == "" && metric("ns/edge") == "") ns = metric("ns/op")
  add(name " ns", ns); add(name " cpu/wall", metric("cpu/wall")); add(name " failedsteals/task", metric("failedsteals/task"))
  add(name " B/task", metric("bytes/task")); add(name " ns/edge", metric("ns/edge"))
  if (name ~ /^Benchmark(Phases|AsyncCPU)/) { add(name " cpu", metric("cpu-ns/task")); if (!(name in pseen)) { pseen[name] = 1; porder[++np] = name } }
  split(name, p, "/"); if (p[2] != "") { nsr[p[1], p[2], round[name]] = ns; shapes[p[1]] = 1 }
}
END {
  print "\n| shape | hetflow ns/task | gofast (first inline) | gofast (last inline) | chan ns/task | hetflow / better gofast | hetflow / chan | hetflow cpu/wall | failed steals/task |"
  print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  ns = split("BenchmarkChain1M BenchmarkIndependent1M BenchmarkTree20 BenchmarkWavefront1000", list, " ")
  for (si = 1; si <= ns; si++) {
    s = list[si]
    if (!((s, "gofast", 1) in nsr)) continue
    for (i = 1; (s, "hetflow", i) in nsr; i++) {
      g = nsr[s, "gofast", i]
      if ((s, "gofastlast", i) in nsr && nsr[s, "gofastlast", i] + 0 < g + 0) g = nsr[s, "gofastlast", i]
      if (g != "") vals[s " r1"] = vals[s " r1"] " " nsr[s, "hetflow", i] / g
      if ((s, "chan", i) in nsr) vals[s " r2"] = vals[s " r2"] " " nsr[s, "hetflow", i] / nsr[s, "chan", i]
    }
    printf "| %s | %s | %s | %s | %s | %.2f | %.4f | %s | %s |\n", s, median(s "/hetflow ns"), median(s "/gofast ns"), median(s "/gofastlast ns"), median(s "/chan ns"), median(s " r1"), median(s " r2"), median(s "/hetflow cpu/wall"), median(s "/hetflow failedsteals/task")
  }
  print "\n| build / run / async (1M items, 2 workers) | CPU ns per task | wall ns per task |"
  print "|---|---:|---:|"
  for (k = 1; k <= np; k++) printf "| %s | %s | %s |\n", porder[k], median(porder[k] " cpu"), median(porder[k] " ns")
  print "\n| benchmark | median | all rounds |"
  print "|---|---:|---|"
  for (k = 1; k <= norder; k++) {
    key = order[k]
    if (key ~ /(Chain1M|Independent1M|Tree20|Wavefront1000)\// || key ~ /^Benchmark(Phases|AsyncCPU)/) continue
    printf "| %s | %s | %s |\n", key, median(key), vals[key]
  }
}' "$raw"
