#!/usr/bin/env bash
# Builds one sandbox template image locally (no registry): mmdebstrap a slim
# Debian rootfs from the recipe, then `docker import` it into our engine as
# rarecloud/sandbox-<template>:latest, labelled with the recipe hash.
#
#   testbackend/images/build.sh [--force] [--stage|--finish] base|python|node
#
# Two stages, both by default:
#   --stage   builds the rootfs and imports it as
#             rarecloud/sandbox-<template>:staged. Needs the engine but not
#             runsc, so setup runs it while runsc is still being built.
#   --finish  smoke-tests the staged image under runsc the way sandboxes run
#             it and only then makes it :latest (a failed smoke test leaves
#             :latest as it was and removes the staged image).
# Prints one line on stdout: "<template> built <secs>s <size>" (--stage:
# "<template> staged <secs>s") or "<template> up to date". Progress goes to
# stderr. The apt sources come from the host's own apt configuration
# (Debian stanzas for the image's suite only); no mirror is named here.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/../../scripts/lib.sh"

SUITE=bookworm
force=0 stage=1 finish=1
while [[ ${1:-} == --* ]]; do
	case $1 in
	--force) force=1 ;;
	--stage) finish=0 ;;
	--finish) stage=0 ;;
	*) die "unknown option $1 (usage: build.sh [--force] [--stage|--finish] base|python|node)" ;;
	esac
	shift
done
((stage + finish > 0)) || die "--stage and --finish exclude each other"
template=${1:?usage: build.sh [--force] [--stage|--finish] base|python|node}
RC_PROG="build $template"
recipe=$here/$template.recipe
[[ -f $recipe ]] || die "no recipe $recipe"
image=rarecloud/sandbox-$template:latest
staged=rarecloud/sandbox-$template:staged

PACKAGES="" IMAGE_ENV=() IMAGE_CMD='' SMOKE='true'
# shellcheck source=/dev/null
. "$recipe"

# What decides the image content: the mmdebstrap options, the image config,
# the customize hook and the suite. The hash of these (not of this script,
# so that edits elsewhere here rebuild nothing) labels the image.
mm_opts=(
	--variant=essential
	--include="$PACKAGES"
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
	--aptopt='APT::Install-Recommends "false"'
	--aptopt='APT::Install-Suggests "false"'
	--aptopt='Acquire::Languages "none"'
	--dpkgopt='force-unsafe-io'
	--dpkgopt='path-exclude=/usr/share/man/*'
	--dpkgopt='path-exclude=/usr/share/info/*'
	--dpkgopt='path-exclude=/usr/share/doc/*'
	--dpkgopt='path-include=/usr/share/doc/*/copyright'
	--dpkgopt='path-exclude=/usr/share/locale/*'
	--dpkgopt='path-exclude=/usr/share/lintian/*'
	--dpkgopt='path-exclude=/usr/share/linda/*'
	--dpkgopt='path-exclude=/usr/share/doc-base/*'
)
changes=(
	-c 'ENV PATH=/home/user/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
	-c 'ENV HOME=/home/user'
	-c 'ENV LANG=C.UTF-8'
	-c 'WORKDIR /home/user'
	-c 'USER 10001:10001'
	-c "CMD $IMAGE_CMD"
)
for e in "${IMAGE_ENV[@]}"; do
	changes+=(-c "ENV $e")
done
hash=$(
	printf 'suite %s\n' "$SUITE"
	printf '%s\n' "${mm_opts[@]}" "${changes[@]}"
	cat "$here/customize.sh"
)
hash=$(sha256sum <<<"$hash" | cut -c1-16)
changes+=(-c "LABEL io.rarecloud.template=$template io.rarecloud.recipe-hash=$hash")

label() { # label IMAGE KEY: the image's label, empty when there is no image
	rc_docker image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true
}

# debian_sources writes the host's enabled Debian apt sources for $SUITE,
# $SUITE-updates and $SUITE-security, as deb822 and one-line files.
debian_sources() {
	local files=() f
	[[ -n ${RC_APT_SOURCES:-} ]] && files=("$RC_APT_SOURCES")
	if [[ ${#files[@]} == 0 ]]; then
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
			[[ -f $f ]] && files+=("$f")
		done
	fi
	: >"$work/host.sources"
	: >"$work/host.list"
	for f in "${files[@]}"; do
		case $f in
		*.sources)
			awk -v suite="$SUITE" '
				function flush(   i, n, s, out, keep) {
					if (nlines == 0) return
					keep = (types ~ /(^|[ \t])deb([ \t]|$)/) && tolower(enabled) != "no"
					n = split(suites, s, /[ \t]+/); out = ""
					for (i = 1; i <= n; i++)
						if (s[i] ~ ("^" suite "(-updates|-security)?$")) out = out " " s[i]
					if (keep && out != "") {
						for (i = 1; i <= nlines; i++) {
							if (lines[i] ~ /^Suites:/) print "Suites:" out
							else if (lines[i] ~ /^Types:/) print "Types: deb"
							else print lines[i]
						}
						print ""
					}
					nlines = 0; types = ""; suites = ""; enabled = ""
				}
				/^#/ { next }
				/^[ \t]*$/ { flush(); next }
				{
					lines[++nlines] = $0
					if ($0 ~ /^Types:/) { types = $0; sub(/^Types:[ \t]*/, "", types) }
					if ($0 ~ /^Suites:/) { suites = $0; sub(/^Suites:[ \t]*/, "", suites) }
					if ($0 ~ /^Enabled:/) { enabled = $0; sub(/^Enabled:[ \t]*/, "", enabled) }
				}
				END { flush() }
			' "$f" >>"$work/host.sources"
			;;
		*)
			# one-line: deb [opts] uri suite components...
			awk -v suite="$SUITE" '
				/^[ \t]*deb[ \t]/ {
					line = $0; sub(/^[ \t]*deb[ \t]+/, "", line)
					opts = ""
					if (line ~ /^\[/) { opts = substr(line, 1, index(line, "]")); line = substr(line, index(line, "]") + 1); sub(/^[ \t]+/, "", line) }
					split(line, w, /[ \t]+/)
					if (w[2] ~ ("^" suite "(-updates|-security)?$")) print "deb " opts " " line
				}
			' "$f" >>"$work/host.list"
			;;
		esac
	done
	MIRRORS=()
	[[ -s $work/host.sources ]] && MIRRORS+=("$work/host.sources")
	[[ -s $work/host.list ]] && MIRRORS+=("$work/host.list")
	[[ ${#MIRRORS[@]} -gt 0 ]] ||
		die "no enabled Debian '$SUITE' apt source found in the host's apt configuration (${files[*]}); set RC_APT_SOURCES to a sources file"
}
# do_stage builds the rootfs and imports it as $staged. Sets $result.
do_stage() {
	if [[ $force == 0 && $(label "$image" io.rarecloud.recipe-hash) == "$hash" ]]; then
		result="$template up to date"
		return
	fi
	# A staged image of this recipe from a run that stopped before its
	# smoke test is used as it is.
	if [[ $force == 0 && $(label "$staged" io.rarecloud.recipe-hash) == "$hash" ]]; then
		log "using the staged $staged (recipe $hash)"
		result="$template staged 0s"
		return
	fi
	mkdir -p "$RC_DATA/build"
	work=$(mktemp -d "$RC_DATA/build/$template.XXXXXX")
	# mmdebstrap unpacks the whole tree in its temporary directory: on a tmpfs
	# that is much faster (dpkg's many small writes, and removing the tree after)
	# when there is room (a tree is at most about 0.5 GB) and exec is allowed.
	chroot_tmp=$work
	if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && $(findmnt -n -o OPTIONS /dev/shm | head -n1) != *noexec* ]] &&
		(($(df -k --output=avail /dev/shm | tail -n1) > 2 * 1024 * 1024)); then
		chroot_tmp=$(mktemp -d "/dev/shm/rarecloud-build-$template.XXXXXX")
	fi
	trap 'rm -rf "$work" "$chroot_tmp"' EXIT
	debian_sources

	mkdir -p "$RC_LOGDIR"
	local buildlog=$RC_LOGDIR/build-$template.log start debootstrapped imported
	start=$(now_ms)
	log "building $staged (recipe $hash) with mmdebstrap"
	TMPDIR=$chroot_tmp mmdebstrap \
		"${mm_opts[@]}" \
		--mode=root \
		--format=tar \
		--customize-hook="'$here/customize.sh' \"\$1\"" \
		--logfile="$buildlog" \
		"$SUITE" "$work/rootfs.tar" "${MIRRORS[@]}" </dev/null >&2 ||
		die "mmdebstrap failed for $template (log $buildlog):
$(tail -n 30 "$buildlog" 2>/dev/null)"
	debootstrapped=$(now_ms)
	rc_docker import "${changes[@]}" -c "LABEL io.rarecloud.stage-ms=$((debootstrapped - start))" \
		-m "rarecloud $template template, recipe $hash" \
		"$work/rootfs.tar" "$staged" >/dev/null || die "docker import failed for $template"
	imported=$(now_ms)
	rm -rf "$work" "$chroot_tmp"
	log "staged $staged (mmdebstrap $(((debootstrapped - start) / 1000))s, import $(((imported - debootstrapped) / 1000))s)"
	result="$template staged $(((imported - start + 500) / 1000))s"
}

# do_finish smoke-tests $staged and makes it $image. Sets $result.
do_finish() {
	local staged_hash
	staged_hash=$(label "$staged" io.rarecloud.recipe-hash)
	if [[ $staged_hash != "$hash" ]]; then
		# Nothing staged, or a staged image of another recipe.
		[[ -z $staged_hash ]] || rc_docker rmi "$staged" >/dev/null 2>&1 || true
		if [[ $(label "$image" io.rarecloud.recipe-hash) == "$hash" ]]; then
			result="$template up to date"
			return
		fi
		die "no staged image of recipe $hash for $template: run build.sh --stage $template first"
	fi
	local start stage_ms out old_id new_id
	start=$(now_ms)
	stage_ms=$(label "$staged" io.rarecloud.stage-ms)
	# Smoke test the image the way sandboxes run it.
	# shellcheck disable=SC2016 # expanded inside the sandbox
	if ! out=$(rc_docker run --rm --runtime=runsc --network=none --read-only --user 10001:10001 \
		--tmpfs /home/user:size=64m,uid=10001,gid=10001,mode=0755 --tmpfs /tmp:size=64m,mode=1777 \
		--cap-drop ALL --security-opt no-new-privileges "$staged" \
		sh -c 'set -e; test "$(id -u):$(id -g)" = 10001:10001; test "$HOME" = /home/user; test "$(pwd)" = /home/user
			for t in timeout sh cat mkdir tar; do command -v $t >/dev/null; done
			timeout 5 true; echo ok > /home/user/probe; cat /home/user/probe >/dev/null
			if touch /etc/probe 2>/dev/null; then echo "root fs writable"; exit 1; fi
			'"$SMOKE" </dev/null 2>&1); then
		rc_docker rmi "$staged" >/dev/null 2>&1 || true
		die "smoke test of $staged failed: $out"
	fi
	old_id=$(rc_docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
	rc_docker tag "$staged" "$image" || die "docker tag $staged $image failed"
	rc_docker rmi "$staged" >/dev/null || die "docker rmi $staged failed"
	new_id=$(rc_docker image inspect -f '{{.Id}}' "$image")
	# Earlier builds of this template that no container uses any more.
	if [[ -n $old_id && $old_id != "$new_id" ]]; then
		rc_docker image prune -f --filter "label=io.rarecloud.template=$template" >/dev/null 2>&1 || true
	fi
	local size smoke_ms secs
	size=$(rc_docker image inspect -f '{{.Size}}' "$image")
	smoke_ms=$(($(now_ms) - start))
	secs=$((((${stage_ms:-0}) + smoke_ms + 500) / 1000))
	log "built $image (smoke test $((smoke_ms / 1000))s), $((size / 1000000)) MB"
	result="$template built ${secs}s $((size / 1000000))MB"
}

rc_engine_answers || die "our engine does not answer on $RC_DOCKER_HOST: run make setup first"
result=""
if ((stage)); then
	do_stage
fi
if ((finish)) && [[ $result != *" up to date" ]]; then
	do_finish
fi
echo "$result"
