#!/usr/bin/env bash
# tool.sh NAME ARGS...: runs a pinned Go tool, installing it from the Go
# module proxy first when it is missing or at another version, where go
# install puts it (GOBIN, else the first GOPATH entry's bin: the user's
# own, no root). The version is read from the binary's build information,
# so a tool of the same name installed any other way is replaced, not
# trusted.
#
#   tool.sh --install NAME...   installs what is missing, runs nothing
#   tool.sh --prefetch NAME...  the same in the background at the lowest
#                               CPU priority, and returns at once: make test
#                               builds the tools on a fresh machine in the
#                               CPU its tests leave idle
#
# An install holds a lock per tool, so a run that needs a tool the
# prefetch is building waits for that build instead of starting another.
#
#   golangci-lint  github.com/golangci/golangci-lint/v2 v2.15.0 (make lint)
#   goreleaser     github.com/goreleaser/goreleaser/v2 v2.15.1 (about 4.5 min
#                  to build on 2 busy cores with a cold module cache)
#   actionlint     github.com/rhysd/actionlint v1.7.12
set -euo pipefail

# pin NAME sets module, pkg and version for a tool.
pin() {
	case $1 in
	golangci-lint) module=github.com/golangci/golangci-lint/v2 pkg=$module/cmd/golangci-lint version=v2.15.0 ;;
	goreleaser) module=github.com/goreleaser/goreleaser/v2 pkg=$module version=v2.15.1 ;;
	actionlint) module=github.com/rhysd/actionlint pkg=$module/cmd/actionlint version=v1.7.12 ;;
	*)
		echo "tool.sh: unknown tool $1" >&2
		exit 2
		;;
	esac
}

gobin=$(go env GOBIN)
if [ -z "$gobin" ]; then
	gopath=$(go env GOPATH)
	gobin=${gopath%%:*}/bin
fi

# ensure NAME installs the pinned tool unless it is there.
ensure() {
	pin "$1"
	local bin=$gobin/$1 info
	mkdir -p "$gobin"
	(
		flock 9
		# Read whole, then matched: under pipefail, grep -q stopping at the
		# match could fail the check with go's SIGPIPE and reinstall the tool.
		info=$(go version -m "$bin" 2>/dev/null || true)
		if ! grep -qP "^\tmod\t\Q$module\E\t\Q$version\E\t" <<<"$info"; then
			echo "$1: installing $pkg@$version into $gobin" >&2
			# The flags of the other tools' builds (scripts/setup.sh's
			# runsc) and of make's (GNUmakefile): one build cache for all
			# of them on a fresh machine.
			CGO_ENABLED=0 GOBIN=$gobin GOFLAGS=-buildvcs=false go install -trimpath "$pkg@$version"
		fi
	) 9>"$gobin/.$1.lock"
}

case ${1:-} in
--install)
	shift
	for t in "$@"; do ensure "$t"; done
	;;
--prefetch)
	shift
	for t in "$@"; do pin "$t"; done # an unknown name fails here, not later
	log=$gobin/.prefetch.log
	mkdir -p "$gobin"
	echo "tools: installing what is missing of $* in the background at nice 19 (log $log)" >&2
	setsid nice -n 19 bash "$0" --install "$@" </dev/null >"$log" 2>&1 &
	;;
"")
	echo "usage: tool.sh NAME ARGS... | --install NAME... | --prefetch NAME..." >&2
	exit 2
	;;
*)
	name=$1
	shift
	ensure "$name"
	exec "$gobin/$name" "$@"
	;;
esac
