#!/usr/bin/env bash
# check.sh: verify hetflow's cuda backend on a machine with the CUDA toolkit and a GPU.
#
#   bash gpu/cuda/check.sh            # from anywhere inside the repository
#
# It vets and tests the -tags cuda build of ./gpu/..., runs the examples (saxpy,
# saxpy-capture, kmeans, where present) on the GPU and on sim and compares their output,
# runs gpu/cuda/gpucheck on both backends (saxpy bit-equal, k-means within 1e-4), and reports
# CUDA-graph versus streams+events launch time of a 1000-node GPU graph. It prints a table and
# exits non-zero if anything failed. CUDA_HOME (default /usr/local/cuda) locates the toolkit.
set -u -o pipefail

root=$(cd "$(dirname "$0")/../.." && pwd) || { echo "check.sh: cannot find the repository root" >&2; exit 2; }
cd "$root" || exit 2
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d) || exit 2
trap 'rm -rf "$work"' EXIT

die() { echo "check.sh: $*" >&2; exit 2; }
command -v go >/dev/null || die "go is not on PATH"
[ -f "$CUDA_HOME/include/cuda.h" ] || die "no $CUDA_HOME/include/cuda.h: install the CUDA toolkit or set CUDA_HOME"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
else
	echo "warning: nvidia-smi not found; the tests will tell whether a GPU is usable" >&2
fi

export CGO_ENABLED=1
export CGO_CFLAGS="-I$CUDA_HOME/include ${CGO_CFLAGS:-}"
export CGO_LDFLAGS="-L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs ${CGO_LDFLAGS:-}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"

rows=()
failed=0
row() { rows+=("$(printf '%-28s %-8s %s' "$1" "$2" "${3:-}")"); [ "$2" = fail ] && failed=1; return 0; }

# step NAME LOGFILE CMD...: run CMD, record ok/fail, keep the log.
step() {
	local name=$1 log=$2
	shift 2
	echo "== $name: $*"
	if "$@" >"$log" 2>&1; then
		row "$name" ok
		return 0
	fi
	row "$name" fail "see below"
	echo "---- $name failed; last lines of its output:"
	tail -n 30 "$log"
	return 1
}

step "vet -tags cuda" "$work/vet.log" go vet -tags cuda ./gpu/...
step "test -tags cuda ./gpu/..." "$work/test.log" go test -tags cuda -count=1 ./gpu/...

# Examples: ok/fail on the GPU, and output equal to sim's once timing lines are dropped.
strip() { grep -Eiv '([0-9.]+ ?(ns|us|µs|ms|s)\b)|backend|elapsed|time' "$1" || true; }
for ex in saxpy saxpy-capture kmeans; do
	if [ ! -d "examples/$ex" ]; then
		row "example $ex" skip "examples/$ex not present"
		continue
	fi
	if step "example $ex (cuda)" "$work/$ex.cuda" go run -tags cuda "./examples/$ex"; then
		if go run "./examples/$ex" >"$work/$ex.sim" 2>&1; then
			if diff <(strip "$work/$ex.sim") <(strip "$work/$ex.cuda") >"$work/$ex.diff"; then
				row "example $ex = sim" ok
			else
				row "example $ex = sim" fail "output differs"
				head -n 20 "$work/$ex.diff"
			fi
		else
			row "example $ex = sim" fail "sim run failed"
			tail -n 20 "$work/$ex.sim"
		fi
	fi
done

# gpucheck: the same fixed problems on both backends, compared; launch times.
if step "gpucheck (sim)" "$work/gc.sim.log" go run ./gpu/cuda/gpucheck run "$work/sim.json" &&
	step "gpucheck (cuda)" "$work/gc.cuda.log" go run -tags cuda ./gpu/cuda/gpucheck run "$work/cuda.json"; then
	if go run ./gpu/cuda/gpucheck compare "$work/sim.json" "$work/cuda.json" >"$work/cmp.log" 2>&1; then
		row "saxpy, k-means = sim" ok "$(tr '\n' ';' <"$work/cmp.log")"
	else
		row "saxpy, k-means = sim" fail "$(tr '\n' ';' <"$work/cmp.log")"
	fi
	graph=$(sed -n 's/.*"graph_launch_us": \([0-9.]*\).*/\1/p' "$work/cuda.json")
	streams=$(sed -n 's/.*"streams_launch_us": \([0-9.]*\).*/\1/p' "$work/cuda.json")
	row "1000-node launch" info "CUDA graph ${graph:-?} us, streams+events ${streams:-?} us (median of 21)"
fi

echo
echo "== hetflow cuda check, $(date -u +%Y-%m-%dT%H:%MZ), $(go version | cut -d' ' -f3)"
printf '%-28s %-8s %s\n' check result notes
for r in "${rows[@]}"; do echo "$r"; done
if [ "$failed" -ne 0 ]; then
	echo "RESULT: FAIL"
	exit 1
fi
echo "RESULT: OK"
