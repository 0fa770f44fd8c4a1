#!/usr/bin/env bash
# Runs docker compose v2 when present, else docker-compose v1, with this repo's compose file.
set -euo pipefail
cd "$(dirname "$0")/.."
if docker compose version >/dev/null 2>&1; then
  exec docker compose -f docker-compose.yml "$@"
elif command -v docker-compose >/dev/null 2>&1; then
  exec docker-compose -f docker-compose.yml "$@"
fi
echo "neither 'docker compose' nor 'docker-compose' is installed" >&2
exit 127
