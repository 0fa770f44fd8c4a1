#!/usr/bin/env bash
# Runs examples/flows/busy.yaml (a dozen 1-3 s spin tasks fanning out into a
# join, a loop, a subflow and a module) on a 3-node `coordinator dev` cluster
# RUNS times (default 10), beside a busy loop on every core, and checks that
# every run succeeded with every task executed exactly once
# (scripts/checkruns). Exits 1 if any run fails the check.
#
#   bash scripts/busy-dev.sh            # 10 runs under the hog
#   RUNS=3 HOG=0 bash scripts/busy-dev.sh   # without the hog
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/hog.sh
RUNS=${RUNS:-10}
mkdir -p build
go build -o build/coordinator ./cmd/coordinator
go build -o build/checkruns ./scripts/checkruns
out=build/busy-dev.jsonl
: >"$out"
[ "${HOG:-1}" = 1 ] && hog_start
bad=0
for i in $(seq "$RUNS"); do
  start=$(date +%s)
  set +e
  timeout 20m build/coordinator dev -v --nodes 3 --json examples/flows/busy.yaml >build/busy-dev.run.json 2>build/busy-dev.run.log
  code=$?
  set -e
  cat build/busy-dev.run.json >>"$out"
  if ! line=$(build/checkruns <build/busy-dev.run.json); then bad=$((bad + 1)); fi
  # What gossip did: deaths declared (memberlist's "Marking ... as failed"), and runs reassigned.
  marked=$(grep -c 'as failed' build/busy-dev.run.log || true)
  moved=$(grep -c 'run reassigned' build/busy-dev.run.log || true)
  cp build/busy-dev.run.log "build/busy-dev.run$i.log"
  echo "run $i/$RUNS: exit $code, $(( $(date +%s) - start )) s, load $(cut -d' ' -f1 /proc/loadavg), gossip deaths $marked, reassigned $moved: $line"
  [ "$code" = 0 ] || bad=$((bad + 1))
done
hog_stop
echo "== $RUNS runs, $bad bad (statuses in $out)"
[ "$bad" = 0 ]
