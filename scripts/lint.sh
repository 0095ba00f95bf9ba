#!/usr/bin/env bash
# make lint: golangci-lint with .golangci.yml, at the version scripts/tool.sh
# pins (installed from the Go module proxy when missing, where go install
# puts it: GOBIN, else the first GOPATH entry's bin, no root).
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/tool.sh golangci-lint run ./...
