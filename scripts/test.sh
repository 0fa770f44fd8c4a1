#!/usr/bin/env bash
# The project's test command (README: "bash scripts/test.sh"); .ci/run calls it.
# Unit tests, e2e on loopback (real natsd, coordinators and nodes), the compose tier (when a
# Docker engine answers), then each fuzz target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
# The dashboard's browser test (e2e/dashboard_test.go) drives Debian's chromium through
# chromium-driver; install them quietly when missing. The test skips, saying why, only when
# they cannot be installed.
if ! command -v chromedriver >/dev/null 2>&1 || ! { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }; then
  sudo=""
  if [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null; then sudo="sudo -n"; fi
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; }; then
    echo "== installing chromium and chromium-driver (the dashboard's browser test)"
    aptlog=$(mktemp)
    if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver; } >"$aptlog" 2>&1; then
      echo "   could not install them (log: $aptlog): the browser test will skip"
    fi
  else
    echo "== chromium/chromium-driver missing and apt-get is not usable here: the browser test will skip"
  fi
fi
echo "== go vet"
go vet ./...
echo "== tests (race, shuffled; includes e2e/)"
go test -race -shuffle=on -timeout 30m ./...
echo "== fuzz targets, ${FUZZTIME:=5s} each"
fuzz() { # package target
  go test -run '^$' -fuzz "^$2\$" -fuzztime "$FUZZTIME" "$1"
}
fuzz ./transport FuzzDecodeSignal
fuzz ./transport FuzzDecodeBatch
fuzz ./transport FuzzDecodeTaskEvent
fuzz ./transport FuzzDecodeAssignment
fuzz ./transport FuzzDecodeControl
fuzz ./transport FuzzDecode
fuzz ./cluster/coord FuzzAPI
fuzz ./cluster/spec FuzzParseYAML
fuzz ./cluster/spec FuzzParseJSON
fuzz ./partition FuzzPartition
echo "== all tests passed"
