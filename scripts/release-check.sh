#!/usr/bin/env bash
# make release-check: proves the release configuration the way the
# Terraform and OpenTofu registries will read a release.
#
#   1. reads the version to release from CHANGELOG.md's first heading
#      (## X.Y.Z (Month D, YYYY)) and checks its section is not empty;
#   2. makes a throwaway GPG key (ed25519, no passphrase) in a temporary
#      GNUPGHOME;
#   3. runs `goreleaser release --snapshot --clean --skip=publish` with
#      GPG_FINGERPRINT, as the release workflow does but without publishing;
#   4. verifies the detached signature over SHA256SUMS with `gpg --verify`
#      (good signature, by the throwaway key) and, as a positive control,
#      that a SHA256SUMS with one line added does NOT verify;
#   5. checks the layout: one zip per platform, each holding only
#      terraform-provider-rarecloud_v<version> (.exe on Windows); the
#      manifest (protocol_versions 6.0) in SHA256SUMS as
#      terraform-provider-rarecloud_<version>_manifest.json; SHA256SUMS
#      listing exactly the zips and the manifest, every checksum correct;
#      the test backend's archives (linux amd64/arm64) apart, with their own
#      good signatures; the linux/amd64 binary reporting the version.
#
# Usage:
#   scripts/release-check.sh              the check on every platform the
#                                         registries offer (about 3-4 minutes
#                                         warm): make release-check, and the
#                                         release workflow
#   scripts/release-check.sh --host       the same check on this machine's
#                                         platform alone (make test): the
#                                         signature and the layout are the
#                                         same question for one platform as
#                                         for thirteen
#   scripts/release-check.sh --notes V    print CHANGELOG.md's section of V
#                                         (the release notes); fails unless V
#                                         is the first, dated heading
# Environment: RELEASE_CHECK_KEEP=1 keeps the work directory.
# Needs go, git, gpg (Debian's gnupg) and unzip; `make setup` installs them.
set -euo pipefail
cd "$(dirname "$0")/.."

project=terraform-provider-rarecloud
# The platforms the registries offer the provider on (.goreleaser.yml).
platforms=(darwin_amd64 darwin_arm64
	freebsd_386 freebsd_amd64 freebsd_arm freebsd_arm64
	linux_386 linux_amd64 linux_arm linux_arm64
	windows_386 windows_amd64 windows_arm64)
backend_platforms=(linux_amd64 linux_arm64)

if [[ -t 2 ]]; then
	red=$'\033[31m' green=$'\033[32m' bold=$'\033[1m' off=$'\033[0m'
else
	red="" green="" bold="" off=""
fi
log() { printf '%srelease-check:%s %s\n' "$bold" "$off" "$*" >&2; }
fail() {
	printf '%srelease-check: FAIL: %s%s\n' "$red" "$*" "$off" >&2
	exit 1
}

# changelog_version prints the version of CHANGELOG.md's first heading,
# which must carry a release date in the HashiCorp style.
changelog_version() {
	local h
	h=$(grep -m1 '^## ' CHANGELOG.md) || fail "CHANGELOG.md has no '## X.Y.Z (Month D, YYYY)' heading"
	[[ $h =~ ^'## '([0-9]+\.[0-9]+\.[0-9]+)' ('(January|February|March|April|May|June|July|August|September|October|November|December)' '[1-9][0-9]?', '[0-9]{4}')'$ ]] ||
		fail "CHANGELOG.md's first heading '$h' is not '## X.Y.Z (Month D, YYYY)'"
	printf '%s\n' "${BASH_REMATCH[1]}"
}

# notes V prints the CHANGELOG.md section of V (without its heading).
notes() {
	local want=$1 have text
	have=$(changelog_version)
	[[ $want == "$have" ]] || fail "the tag is v$want but CHANGELOG.md's first heading is $have"
	text=$(awk -v v="$want" '
		index($0, "## " v " (") == 1 { on = 1; next }
		on && /^## / { exit }
		on { print }' CHANGELOG.md)
	[[ -n ${text//[[:space:]]/} ]] || fail "CHANGELOG.md has nothing under ## $want"
	printf '%s\n' "$text"
}

if [[ ${1:-} == --notes ]]; then
	notes "${2:?usage: release-check.sh --notes VERSION}"
	exit 0
fi
host_only=0
if [[ ${1:-} == --host ]]; then
	host_only=1
	shift
fi
[[ $# == 0 ]] || fail "usage: release-check.sh [--host | --notes VERSION]"

for tool in go git gpg unzip sha256sum; do
	command -v "$tool" >/dev/null || fail "$tool is not on PATH (make setup installs gnupg and unzip)"
done

host=$(go env GOHOSTOS)_$(go env GOHOSTARCH)
if ((host_only)); then
	[[ " ${platforms[*]} " == *" $host "* ]] || fail "this machine's platform $host is not one the registries are offered"
	platforms=("$host")
	[[ " ${backend_platforms[*]} " == *" $host "* ]] && backend_platforms=("$host") || backend_platforms=()
fi

# host_config rewrites a GoReleaser configuration so that every build is
# for this machine's platform alone: each goos and goarch list becomes the
# host's, and ignore lists go. Everything else (archives, checksums,
# signatures) stays as it is.
host_config() {
	awk -v os="$(go env GOHOSTOS)" -v arch="$(go env GOHOSTARCH)" '
		/^    (goos|goarch|ignore):/ {
			skip = 1
			if ($1 == "goos:") print "    goos: [" os "]"
			if ($1 == "goarch:") print "    goarch: [" arch "]"
			next
		}
		skip && /^      / { next }
		{ skip = 0; print }'
}

t0=$SECONDS
version=$(changelog_version)
notes "$version" >/dev/null
log "CHANGELOG.md: $version"

work=$(mktemp -d "${TMPDIR:-/tmp}/release-check.XXXXXX")
cleanup() {
	local rc=$?
	gpgconf --homedir "$work/gnupg" --kill all >/dev/null 2>&1 || true
	if [[ ${RELEASE_CHECK_KEEP:-0} == 1 || $rc != 0 ]]; then
		log "work directory kept: $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- key
export GNUPGHOME=$work/gnupg
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "release-check <release-check@example.invalid>" ed25519 sign never 2>/dev/null ||
	fail "gpg could not make the throwaway key"
fpr=$(gpg --batch --with-colons --list-secret-keys 2>/dev/null | awk -F: '$1 == "fpr" { print $10; exit }')
[[ -n $fpr ]] || fail "no fingerprint for the throwaway key"
log "throwaway key $fpr"

# ---------------------------------------------------------------- snapshot
# The configuration as it is, with its output in the work directory and,
# as a snapshot has no tag (and a clone without a remote gives GoReleaser
# no git state at all), the CHANGELOG's version for the snapshot's.
cfg=$work/goreleaser.yml
if ((host_only)); then
	host_config <.goreleaser.yml >"$cfg"
	log "platform: $host alone (--host)"
else
	cat .goreleaser.yml >"$cfg"
fi
printf '\ndist: %s\nsnapshot:\n  version_template: "%s-SNAPSHOT"\n' "$work/dist" "$version" >>"$cfg"
grep -q '^snapshot:' .goreleaser.yml && fail ".goreleaser.yml has a snapshot section: release-check sets its own"
log "goreleaser release --snapshot --clean --skip=publish (version $version-SNAPSHOT)"
tg=$SECONDS
if ! GPG_FINGERPRINT=$fpr GORELEASER_CURRENT_TAG=v$version \
	bash scripts/tool.sh goreleaser release --snapshot --clean --skip=publish --config "$cfg" >"$work/goreleaser.log" 2>&1; then
	tail -n 40 "$work/goreleaser.log" >&2
	fail "goreleaser failed (log: $work/goreleaser.log)"
fi
log "snapshot built in $((SECONDS - tg))s"
dist=$work/dist

rel=$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$dist/metadata.json" | head -n1)
[[ $rel == "$version-SNAPSHOT" ]] || fail "goreleaser built version '$rel', expected $version (a snapshot of it)"
log "built version $rel"

sums=$dist/${project}_${rel}_SHA256SUMS
sig=$sums.sig
[[ -f $sums ]] || fail "missing $(basename "$sums")"
[[ -f $sig ]] || fail "missing $(basename "$sig")"

# ---------------------------------------------------------------- signatures
# verify FILE SIG: a good signature by the throwaway key, nothing else.
verify() {
	local status
	status=$(gpg --batch --status-fd 1 --verify "$2" "$1" 2>"$work/gpg.err") || {
		cat "$work/gpg.err" >&2
		return 1
	}
	grep -q "^\[GNUPG:\] GOODSIG " <<<"$status" && grep -q "^\[GNUPG:\] VALIDSIG $fpr " <<<"$status"
}
verify "$sums" "$sig" || fail "gpg --verify $(basename "$sig") $(basename "$sums"): not a good signature by $fpr; the registry would refuse this release"
log "${green}gpg --verify $(basename "$sig"): good signature by $fpr${off}"
# Positive control: the same check refuses a SHA256SUMS that changed after
# signing (what GoReleaser did when it added the .sig to the list).
cp "$sums" "$work/tampered"
printf '%064d  %s\n' 0 "$(basename "$sig")" >>"$work/tampered"
if verify "$work/tampered" "$sig" 2>/dev/null; then
	fail "a SHA256SUMS changed after signing still verifies: the signature check proves nothing"
fi

# ---------------------------------------------------------------- layout
# The manifest is uploaded from the repository (release.extra_files) under
# the name SHA256SUMS lists it by (checksum.extra_files).
manifest=${project}_${rel}_manifest.json
tr -d ' \n\t' <terraform-registry-manifest.json | grep -q '"protocol_versions":\["6.0"\]' ||
	fail "terraform-registry-manifest.json does not declare protocol_versions [\"6.0\"]"
mkdir "$work/upload"
cp terraform-registry-manifest.json "$work/upload/$manifest"

want=("$manifest")
for p in "${platforms[@]}"; do
	zip=${project}_${rel}_${p}.zip
	want+=("$zip")
	[[ -f $dist/$zip ]] || fail "missing $zip"
	bin=${project}_v${rel}
	[[ $p == windows_* ]] && bin+=.exe
	entries=$(unzip -Z1 "$dist/$zip") || fail "$zip is not a zip"
	[[ $entries == "$bin" ]] || fail "$zip holds '$(tr '\n' ' ' <<<"$entries")', expected only $bin"
done
# SHA256SUMS: exactly the zips and the manifest, each checksum right.
listed=$(awk '{ print $2 }' "$sums" | sort)
expected=$(printf '%s\n' "${want[@]}" | sort)
if [[ $listed != "$expected" ]]; then
	diff <(echo "$expected") <(echo "$listed") >&2 || true
	fail "$(basename "$sums") does not list exactly the provider zips and the manifest (< expected, > listed)"
fi
# Every file as the release uploads it: the dist files and the manifest.
for f in "${want[@]}"; do [[ -f $work/upload/$f ]] || ln -s "$dist/$f" "$work/upload/$f"; done
(cd "$work/upload" && sha256sum --quiet --strict -c "$sums") >&2 || fail "a checksum in $(basename "$sums") is wrong"
[[ $(grep -cF '{{ .ProjectName }}_{{ .Version }}_manifest.json' .goreleaser.yml) == 2 ]] ||
	fail ".goreleaser.yml must name the manifest {{ .ProjectName }}_{{ .Version }}_manifest.json in checksum.extra_files and release.extra_files"
extra=$(find "$dist" -maxdepth 1 -name "${project}_*.zip" | wc -l)
((extra == ${#platforms[@]})) || fail "$extra provider zips, expected ${#platforms[@]}"
log "layout: ${#platforms[@]} zips with one binary each, manifest, $(wc -l <"$sums") checksums all correct"

# The test backend: its own archives and signatures, never in SHA256SUMS.
for p in "${backend_platforms[@]}"; do
	tgz=rarecloud-testbackend_${rel}_${p}.tar.gz
	[[ -f $dist/$tgz ]] || fail "missing $tgz"
	files=$(tar -tzf "$dist/$tgz" | sort | tr '\n' ' ')
	[[ $files == "LICENSE openapi.yaml rarecloud-agent rarecloud-testbackend " ]] ||
		fail "$tgz holds '$files', expected LICENSE openapi.yaml rarecloud-agent rarecloud-testbackend"
	verify "$dist/$tgz" "$dist/$tgz.sig" || fail "gpg --verify $tgz.sig: not a good signature"
done
log "test backend: ${backend_platforms[*]} archives, signatures good"

# The binary reports the version (provider metadata and User-Agent use it).
if [[ $host == linux_amd64 ]]; then
	got=$(unzip -p "$dist/${project}_${rel}_linux_amd64.zip" >"$work/provider" && chmod +x "$work/provider" && "$work/provider" -version)
	[[ $got == "$project $rel" ]] || fail "the linux/amd64 binary says '$got', expected '$project $rel'"
	log "binary: $got"
fi

log "${green}ok${off} ($((SECONDS - t0))s)"
