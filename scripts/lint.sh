#!/usr/bin/env bash
# make lint: golangci-lint with .golangci.yml, installed from the Go module
# proxy at a pinned version when missing, where go install puts it: GOBIN,
# else the first GOPATH entry's bin (the user's own, ~/go/bin: no root).
set -euo pipefail
cd "$(dirname "$0")/.."
version=v2.15.0
gobin=$(go env GOBIN)
if [ -z "$gobin" ]; then
	gopath=$(go env GOPATH)
	gobin=${gopath%%:*}/bin
fi
bin=$gobin/golangci-lint
# The output is read whole before it is matched (grep -q stops at the
# match; under pipefail the tool's SIGPIPE would mean a reinstall).
have=$("$bin" version 2>/dev/null || true)
if ! grep -q "version ${version#v} " <<<"$have"; then
	echo "lint: installing golangci-lint $version into $gobin" >&2
	GOBIN=$gobin go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
fi
"$bin" run ./...
