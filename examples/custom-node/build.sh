#!/usr/bin/env bash
# Builds the custom node's static binaries and its FROM-scratch image
# (HETFLOW_CUSTOM_IMAGE overrides the tag hetflow-custom-node:dev).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build/tmp
chmod 1777 build/tmp
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o build/custom-node .
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o build/wordfreq ./wordfreq
cp Dockerfile build/Dockerfile
docker build -q -t "${HETFLOW_CUSTOM_IMAGE:-hetflow-custom-node:dev}" build >/dev/null
echo "built ${HETFLOW_CUSTOM_IMAGE:-hetflow-custom-node:dev}"
