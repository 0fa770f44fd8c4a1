#!/usr/bin/env bash
# Compares partition.Partition with METIS (gpmetis) on generated graphs of
# 10K-1M vertices and prints a Markdown table (docs/benchmarks/partition.md).
#
#   scripts/partition-bench.sh            # the full set, 3 seeds each (~3-4 min here)
#   scripts/partition-bench.sh -set small # four 10K graphs, seconds
#   scripts/partition-bench.sh -only rgg  # graphs whose name contains "rgg"
#
# Needs gpmetis (Debian/Ubuntu: apt-get install -y metis); without it, our
# side alone is measured. Only this script uses METIS, never the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
metis=$(command -v gpmetis || true)
if [[ -z "$metis" ]]; then
	echo "gpmetis not found (apt-get install -y metis): measuring ours only" >&2
fi
go build -o "${TMPDIR:-/tmp}/partbench" ./partition/internal/cmd/partbench
echo "<!-- $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(go version | cut -d' ' -f3), gpmetis: ${metis:-none} -->"
exec "${TMPDIR:-/tmp}/partbench" -gpmetis "$metis" "$@"
