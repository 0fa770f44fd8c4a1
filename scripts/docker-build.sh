#!/usr/bin/env bash
# docker-build.sh TAG DIR: docker build -q -t TAG DIR, quietly. Without
# buildx, docker prints a notice that its legacy builder is deprecated on
# every build: a FROM-scratch image needs nothing else, so that notice is
# dropped; any other message, and every message of a failed build, is shown.
# scripts/compose-build.sh and examples/custom-node/build.sh use it.
set -euo pipefail
errs=$(mktemp)
if ! docker build -q -t "$1" "$2" >/dev/null 2>"$errs"; then
  cat "$errs" >&2
  rm -f "$errs"
  exit 1
fi
grep -v -e '^DEPRECATED: The legacy builder is deprecated' -e '^ *Install the buildx component' \
  -e '^ *https://docs.docker.com/go/buildx/' -e '^ *BuildKit is currently disabled' -e '^ *environment-variable\.$' -e '^$' "$errs" >&2 || true
rm -f "$errs"
