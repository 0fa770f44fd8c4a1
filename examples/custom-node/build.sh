#!/usr/bin/env bash
# Builds the custom node's static binaries and its FROM-scratch image
# (HETFLOW_CUSTOM_IMAGE overrides the tag hetflow-custom-node:dev), then
# issues each custom node's own credential (node --credentials-file) into
# the hetflow checkout's build/docker/, beside n1.cred..n3.cred, where
# compose.override.yml mounts it. Run it after that checkout's
# bash scripts/compose-build.sh (which makes the cluster secret and the
# coordinator CLI that issues credentials). The checkout is the one go.mod's
# replace points at (HETFLOW_REPO overrides it); HETFLOW_CUSTOM_NODES names
# the nodes (default "u1 u2", the override's services).
set -euo pipefail
cd "$(dirname "$0")"
repo=${HETFLOW_REPO:-$(go list -m -f '{{.Dir}}' github.com/hetflow/hetflow)}
docker_dir=$repo/build/docker
if [ ! -x "$docker_dir/coordinator" ] || [ ! -f "$docker_dir/secret" ]; then
  echo "build.sh: $docker_dir has no coordinator or secret: run bash scripts/compose-build.sh in $repo first" >&2
  exit 1
fi
mkdir -p build/tmp
chmod 1777 build/tmp
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o build/custom-node .
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o build/wordfreq ./wordfreq
cp Dockerfile build/Dockerfile
bash "$repo/scripts/docker-build.sh" "${HETFLOW_CUSTOM_IMAGE:-hetflow-custom-node:dev}" build
for n in ${HETFLOW_CUSTOM_NODES:-u1 u2}; do
  rm -f "$docker_dir/$n.cred"
  "$docker_dir/coordinator" credentials "$n" --secret-file "$docker_dir/secret" --out "$docker_dir/$n.cred" >/dev/null
done
echo "built ${HETFLOW_CUSTOM_IMAGE:-hetflow-custom-node:dev}; credentials of ${HETFLOW_CUSTOM_NODES:-u1 u2} in $docker_dir"
