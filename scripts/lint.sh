#!/usr/bin/env bash
# make lint: golangci-lint with .golangci.yml, installed from the Go module
# proxy at a pinned version when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v2.15.0
bin=$(go env GOPATH)/bin/golangci-lint
if ! "$bin" version 2>/dev/null | grep -q "version ${version#v} "; then
	echo "lint: installing golangci-lint $version" >&2
	go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
fi
"$bin" run ./...
