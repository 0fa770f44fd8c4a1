#!/usr/bin/env bash
# Builds the static binaries and the hetflow:dev image (HETFLOW_IMAGE overrides the tag) that docker-compose.yml runs.
# No image is pulled: the image is FROM scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/docker
mkdir -p "$out"
for b in coordinator node natsd; do
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/$b" "./cmd/$b"
done
# the default cluster secret for the compose cluster (override with HETFLOW_SECRET_FILE)
if [ -n "${HETFLOW_SECRET_FILE:-}" ]; then
  cp "$HETFLOW_SECRET_FILE" "$out/secret"
elif [ ! -f "$out/secret" ]; then
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$out/secret"
fi
# each node's own credential (node --credentials-file), issued from the secret
for n in n1 n2 n3; do
  rm -f "$out/$n.cred"
  "$out/coordinator" credentials "$n" --secret-file "$out/secret" --out "$out/$n.cred" >/dev/null
done
# the API token clients on the host use: build/docker/token (--token-file)
"$out/coordinator" token --secret-file "$out/secret" > "$out/token"
cp docker/Dockerfile "$out/Dockerfile"
bash scripts/docker-build.sh "${HETFLOW_IMAGE:-hetflow:dev}" "$out"
echo "built ${HETFLOW_IMAGE:-hetflow:dev}"
