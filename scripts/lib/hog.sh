# Sourced by the scripts that test under load: hog_start starts one busy
# loop per core (HOG_PER_CORE of them, default 1) as background processes,
# hog_stop ends them; an EXIT trap ends them in any case. "Slow is not dead":
# these scripts show the cluster keeps its verdicts and its nodes alive
# while other programs keep every core busy.
HOG_PIDS=()
hog_start() {
  local n=$(( $(nproc) * ${HOG_PER_CORE:-1} ))
  for _ in $(seq "$n"); do
    bash -c 'while :; do :; done' &
    HOG_PIDS+=($!)
  done
  trap hog_stop EXIT
  echo "== CPU hog: $n busy loops on $(nproc) cores (load now: $(cut -d' ' -f1-3 /proc/loadavg))"
}
hog_stop() {
  if [ ${#HOG_PIDS[@]} -gt 0 ]; then
    kill "${HOG_PIDS[@]}" 2>/dev/null || true
    wait "${HOG_PIDS[@]}" 2>/dev/null || true
    HOG_PIDS=()
  fi
}
