#!/usr/bin/env bash
# The unit tests of every package and the loopback e2e tier (real natsd,
# coordinator and node processes), beside a busy loop on every core: our
# machines often run at load 10-20, and nothing may take a live process for
# dead, or a test fail, only because the machine is busy. The compose and
# browser tiers are left out (TestCompose*, TestDashboardInHeadlessChromium). Bounded by
# TIMEOUT (default 40m for the whole go test).
#
#   bash scripts/test-under-load.sh                 # one busy loop per core
#   HOG_PER_CORE=2 bash scripts/test-under-load.sh  # heavier
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/hog.sh
hog_start
mkdir -p build
start=$(date +%s)
set +e
go test -race -shuffle=on -count=1 -timeout "${TIMEOUT:-40m}" -skip 'TestCompose|TestDashboardInHeadlessChromium' ./... 2>&1 | tee build/test-under-load.log
code=${PIPESTATUS[0]}
set -e
hog_stop
echo "== go test beside the hog: exit $code in $(( $(date +%s) - start )) s (log: build/test-under-load.log)"
exit "$code"
