#!/usr/bin/env bash
# Assembles BENCHMARKS.md from the per-package figures in docs/benchmarks/.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  cat <<'HEAD'
# Benchmarks

Every figure below comes with the command that produced it. Machine: the project's build machine,
2 cores, 24 GiB, Go 1.26.8, shared with other builds and noisy: quote medians and the ratios
between benchmarks of one run, not absolute numbers. No GPU was available: every GPU figure is on
the `sim` backend and **the CUDA path is unverified** (`gpu/cuda/check.sh` is the script to run
on a GPU machine; its output goes here when one is available).

Sections: localexec, htdg (the seed's HTDG and co-run experiments), timed-sim (the same on modelled devices), gpu, transport, node, cluster,
cluster-bench (`coordinator bench`), recovery, failover (leader, NATS, chaos), partition, spec, bad input, dashboard. Sources:
`docs/benchmarks/*.md` (this file is made by `scripts/benchmarks-md.sh`).

HEAD
  for f in localexec htdg timed-sim gpu transport node cluster cluster-bench recovery failover partition spec bad-input dashboard; do
    echo
    cat "docs/benchmarks/$f.md"
  done
} > BENCHMARKS.md
