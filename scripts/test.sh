#!/usr/bin/env bash
# The project's test command (README: "bash scripts/test.sh").
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:-}
echo "== go vet"
go vet ./...
echo "== unit tests (race, shuffled)"
go test -race -shuffle=on -timeout 20m ./...
