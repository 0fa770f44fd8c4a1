# Sourced by the benchmarks that run a cluster of separate processes on
# loopback (bench-status.sh, bench-registry.sh). loopback_up NAME builds the
# node, natsd and (unless $COORD names a build) coordinator binaries into
# $out, starts natsd, one coordinator (`serve`, its limits raised to $n
# tasks) and $nodes nodes, and returns once the nodes are alive; it sets
# coordbin, api (the coordinator's URL) and cpid (its process id), and an
# EXIT trap that stops them all and removes their data. It needs out, nodes
# and n set; NAME prefixes its errors. cpu prints the CPU the coordinator
# has spent, in clock ticks (utime+stime), tck is a second's ticks.
cpu() { awk '{ print $14 + $15 }' "/proc/$cpid/stat"; }
tck=$(getconf CLK_TCK)
loopback_free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
loopback_cleanup() {
  for p in "${loopback_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${loopback_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$loopback_data"
}
loopback_up() {
  local name=$1 np hp gp rp i
  coordbin=${COORD:-$out/coordinator}
  [ -n "${COORD:-}" ] || go build -o "$out/coordinator" ./cmd/coordinator
  go build -o "$out/node" ./cmd/node
  go build -o "$out/natsd" ./cmd/natsd
  loopback_data=$(mktemp -d)
  loopback_pids=()
  trap loopback_cleanup EXIT
  np=$(loopback_free) hp=$(loopback_free) gp=$(loopback_free) rp=$(loopback_free)
  "$out/natsd" --addr 127.0.0.1:"$np" --store "$loopback_data/nats" 2>"$out/natsd.log" &
  loopback_pids+=($!)
  "$coordbin" serve --id c1 --bootstrap --data "$loopback_data/c1" --raft 127.0.0.1:"$rp" --http 127.0.0.1:"$hp" \
    --gossip 127.0.0.1:"$gp" --nats nats://127.0.0.1:"$np" --max-tasks "$n" --max-flow-bytes $((1 << 30)) 2>"$out/coord.log" &
  cpid=$!
  loopback_pids+=($cpid)
  api=http://127.0.0.1:$hp
  for ((i = 1; i <= nodes; i++)); do
    "$out/node" --id "n$i" --nats nats://127.0.0.1:"$np" --gossip 127.0.0.1:"$(loopback_free)" --join 127.0.0.1:"$gp" 2>"$out/n$i.log" &
    loopback_pids+=($!)
  done
  for ((i = 0; ; i++)); do
    if [ "$("$coordbin" nodes --json --server "$api" 2>/dev/null | grep -o '"alive"' | wc -l)" -ge "$nodes" ]; then break; fi
    [ "$i" -lt 300 ] || { echo "$name: the cluster did not come up" >&2; tail "$out"/*.log >&2; exit 1; }
    sleep 0.2
  done
}
