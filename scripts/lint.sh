#!/usr/bin/env bash
# gofmt, go vet and staticcheck over the whole tree; scripts/test.sh (and so .ci/run) runs it first,
# `make lint` alone. staticcheck is pinned and comes from the Go module proxy with `go install`;
# the binary is kept in the Go bin directory and installed again only when its version is not
# the pinned one. If it cannot be installed the script fails: CI never skips the linter.
# staticcheck runs its default checks; there is no staticcheck.conf (no exclusion is needed).
set -euo pipefail
cd "$(dirname "$0")/.."
# 0.8.2 is staticcheck 2026.2.2, the first release line built for Go 1.26 (its go.mod says 1.26.0).
STATICCHECK_VERSION=v0.8.2
gobin=$(go env GOBIN)
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
sc="$gobin/staticcheck"
if ! { [ -x "$sc" ] && "$sc" -version 2>/dev/null | grep -qF "(${STATICCHECK_VERSION#v})"; }; then
  echo "== installing staticcheck $STATICCHECK_VERSION into $gobin (go install, from the module proxy)"
  if ! go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"; then
    echo "FAIL: could not install staticcheck $STATICCHECK_VERSION (GOPROXY=$(go env GOPROXY)); the lint step cannot run" >&2
    exit 1
  fi
fi
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "FAIL: not gofmt-ed (run gofmt -w on them):" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "== go vet"
go vet ./...
echo "== staticcheck ($("$sc" -version))"
"$sc" ./...
