#!/usr/bin/env bash
# Runs docker compose v2 when present, else docker-compose v1, with this repo's compose file.
# HETFLOW_COMPOSE=v2 or v1 insists on one of them (e2e/compose_test.go runs the cluster with both).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${HETFLOW_COMPOSE:-}" in
  v2)
    if ! docker compose version >/dev/null 2>&1; then
      echo "HETFLOW_COMPOSE=v2 but 'docker compose' is not installed (bash scripts/install-compose-v2.sh builds it)" >&2
      exit 127
    fi
    exec docker compose -f docker-compose.yml "$@" ;;
  v1)
    if ! command -v docker-compose >/dev/null 2>&1; then
      echo "HETFLOW_COMPOSE=v1 but 'docker-compose' is not installed" >&2
      exit 127
    fi
    exec docker-compose -f docker-compose.yml "$@" ;;
  "") ;;
  *)
    echo "HETFLOW_COMPOSE must be v2, v1 or unset, not '$HETFLOW_COMPOSE'" >&2
    exit 2 ;;
esac
if docker compose version >/dev/null 2>&1; then
  exec docker compose -f docker-compose.yml "$@"
elif command -v docker-compose >/dev/null 2>&1; then
  exec docker-compose -f docker-compose.yml "$@"
fi
echo "neither 'docker compose' nor 'docker-compose' is installed" >&2
exit 127
