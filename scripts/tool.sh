#!/usr/bin/env bash
# tool.sh NAME ARGS...: runs a pinned Go tool, installing it from the Go
# module proxy first when it is missing or at another version, where go
# install puts it (GOBIN, else the first GOPATH entry's bin) (like scripts/lint.sh does for golangci-lint). The
# version is read from the binary's build information, so a tool of the
# same name installed any other way is replaced, not trusted.
#
#   goreleaser  github.com/goreleaser/goreleaser/v2 v2.15.1 (about 4.5 min
#               to build on 2 busy cores with a cold module cache)
#   actionlint  github.com/rhysd/actionlint v1.7.12
set -euo pipefail

name=${1:?usage: tool.sh NAME ARGS...}
shift
case $name in
goreleaser) module=github.com/goreleaser/goreleaser/v2 pkg=github.com/goreleaser/goreleaser/v2 version=v2.15.1 ;;
actionlint) module=github.com/rhysd/actionlint pkg=github.com/rhysd/actionlint/cmd/actionlint version=v1.7.12 ;;
*)
	echo "tool.sh: unknown tool $name" >&2
	exit 2
	;;
esac

gobin=$(go env GOBIN)
if [ -z "$gobin" ]; then
	gopath=$(go env GOPATH)
	gobin=${gopath%%:*}/bin
fi
bin=$gobin/$name
# Read whole, then matched: under pipefail, grep -q stopping at the match
# could fail the check with go's SIGPIPE and reinstall the tool.
info=$(go version -m "$bin" 2>/dev/null || true)
if ! grep -qP "^\tmod\t\Q$module\E\t\Q$version\E\t" <<<"$info"; then
	echo "$name: installing $pkg@$version" >&2
	GOBIN=$gobin GOFLAGS=-buildvcs=false go install "$pkg@$version"
fi
exec "$bin" "$@"
