#!/usr/bin/env bash
# Runs go test with the given arguments and reports how many tests ran
# (scripts/testsummary): a failure, a skip or a package that does not build
# fails the run. The last line is "N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
# A directory of mktemp's (a fixed name under /tmp, even with the PID,
# could be another user's link that the build writes through).
bin=$(mktemp -d "${TMPDIR:-/tmp}/rarecloud-gotest.XXXXXX")
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/testsummary" ./scripts/testsummary
set +e
go test -json "$@" 2>&1 | "$bin/testsummary"
codes=("${PIPESTATUS[@]}")
set -e
if [[ ${codes[0]} != 0 && ${codes[1]} == 0 ]]; then
	echo "go test failed (exit ${codes[0]}) without a failed test"
	echo "0 passed, 1 failed"
	exit 1
fi
exit "${codes[1]}"
