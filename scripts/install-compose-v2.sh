#!/usr/bin/env bash
# Builds the Docker Compose v2 CLI plugin (`docker compose`) from the Go module proxy and
# installs it as a Docker CLI plugin, for machines with Go and Docker but no compose v2 and no
# reachable download site (docs/design.md, "The contract": compose v2 and v1 must both work). Needs only go, docker
# and a module proxy (GOPROXY); nothing is pulled from an image registry.
#
#   bash scripts/install-compose-v2.sh            # no-op when `docker compose version` works
#   bash scripts/install-compose-v2.sh --force    # build and install anyway
#
# COMPOSE_V2_VERSION picks the release (default below). The plugin goes to
# ${DOCKER_CONFIG:-~/.docker}/cli-plugins/docker-compose (the per-user plugin directory the
# docker CLI searches first), or to COMPOSE_V2_DEST when set (e.g. /usr/local/lib/docker/cli-plugins).
#
# Version: v2.35.1 (April 2025). Its Docker client (github.com/docker/docker v28.1) negotiates the
# API version down to the engine's (1.41 for Engine 20.10, Debian bookworm's), the oldest engines
# compose still guards for. `go install module@version` refuses compose's go.mod (it has exclude
# directives), so the module is built as the main module, from a copy of its proxy download,
# with its own go.sum. A cold build takes several minutes (the Go build cache keeps it after).
set -euo pipefail
version="${COMPOSE_V2_VERSION:-v2.35.1}"
dest="${COMPOSE_V2_DEST:-${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins}"
module=github.com/docker/compose/v2

if [ "${1:-}" != "--force" ] && docker compose version >/dev/null 2>&1; then
  echo "docker compose is already installed: $(docker compose version)"
  exit 0
fi
for tool in go docker; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-compose-v2: $tool is not installed" >&2
    exit 1
  fi
done

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
t0=$(date +%s)
echo "== building docker compose $version from the Go module proxy ($(go env GOPROXY))"
# Outside any module and workspace, so that this repository's go.mod is not touched.
cd "$work"
export GOWORK=off GOFLAGS=-mod=readonly
if ! dir=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || [ -z "$dir" ]; then
  echo "install-compose-v2: could not download $module@$version from the module proxy" >&2
  exit 1
fi
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
(cd "$work/src" && go build -trimpath \
  -ldflags "-s -w -X $module/internal.Version=$version" -o "$work/docker-compose" ./cmd)
mkdir -p "$dest"
install -m 0755 "$work/docker-compose" "$dest/docker-compose"
echo "installed $dest/docker-compose in $(( $(date +%s) - t0 )) s"

# The docker CLI finds the plugin there; check that it answers and reaches the engine.
if ! docker compose version; then
  echo "install-compose-v2: 'docker compose version' fails with $dest/docker-compose installed" \
    "(the docker CLI searches \${DOCKER_CONFIG:-~/.docker}/cli-plugins and /usr/local/lib/docker/cli-plugins)" >&2
  exit 1
fi
if docker info >/dev/null 2>&1 && ! docker compose ls >/dev/null; then
  echo "install-compose-v2: docker compose $version cannot talk to this Docker engine" \
    "(API $(docker version --format '{{.Server.APIVersion}}' 2>/dev/null || echo '?'))" >&2
  exit 1
fi
