#!/usr/bin/env bash
# The project's test command (README: "bash scripts/test.sh"); .ci/run calls it.
# Unit tests, e2e on loopback (real natsd, coordinators and nodes), the compose tier (when a
# Docker engine answers), then each fuzz target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
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
