#!/usr/bin/env bash
# make setup: prepares this machine for the RareCloud test backend.
#
#   1. checks terraform and go
#   2. installs the apt packages that are missing (no apt at all when none is)
#   3. builds the pinned runsc (gVisor) into /usr/local/lib/rarecloud/bin
#   4. starts our own dockerd on unix:///run/rarecloud/docker.sock with runsc
#   5. creates the sandbox network rarecloud-sandbox and its firewall rules
#   6. builds the template images rarecloud/sandbox-{base,python,node}:latest
#
# Idempotent: a second run only checks and takes seconds. Runs as root,
# non-interactively. Progress goes to stderr, a one-line summary to stdout.
#
# Environment:
#   RC_IMAGE_JOBS=N   build up to N images at once (default 3: all together;
#                     on 2 busy cores 122 s against 185 s one after another)
#   RC_FORCE_IMAGES=1 rebuild the images even when their recipe is unchanged
#   RC_APT_SOURCES=F  apt sources file for the image builds (default: the
#                     host's own Debian sources)
set -euo pipefail

RC_PROG=setup
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

export DEBIAN_FRONTEND=noninteractive
summary=()
t0=$(now_ms)
cleanup=()
on_exit() {
	local p
	for p in "${cleanup[@]}"; do rm -rf "$p"; done
}
trap on_exit EXIT

[[ $(id -u) == 0 ]] || die "must run as root (it installs packages and starts dockerd)"

# ---------------------------------------------------------------- 1. tools
check_tools() {
	if ! command -v terraform >/dev/null; then
		die "terraform is not on PATH. It must be preinstalled (expected /usr/local/bin/terraform 1.11.x): no Terraform registry or release site is reachable from here, so setup cannot fetch it."
	fi
	local tfv
	tfv=$(terraform version 2>/dev/null | head -n1 || true)
	[[ $tfv == "Terraform v1.11."* ]] || log "warning: expected Terraform 1.11.x, found '${tfv:-unknown}'"
	command -v go >/dev/null || die "go is not on PATH (expected /usr/local/go/bin/go); it is needed to build runsc and the provider"
	log "tools ok: ${tfv:-terraform}, $(go version | awk '{print $3}')"
}

# ---------------------------------------------------------------- 2. packages
PACKAGES=(docker.io containerd runc tini mmdebstrap busybox-static iptables iproute2 ca-certificates util-linux procps)

ensure_packages() {
	local missing=() p st
	for p in "${PACKAGES[@]}"; do
		st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
		[[ $st == installed ]] || missing+=("$p")
	done
	if [[ ${#missing[@]} == 0 ]]; then
		log "packages ok"
		summary+=("packages ok")
		return
	fi
	log "installing ${missing[*]}"
	local t
	t=$(now_ms)
	apt-get update -qq </dev/null >&2 || die "apt-get update failed"
	apt-get install -y -qq --no-install-recommends \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${missing[@]}" </dev/null >&2 || die "apt-get install ${missing[*]} failed"
	summary+=("packages installed: ${missing[*]} ($((($(now_ms) - t) / 1000))s)")
}

# ---------------------------------------------------------------- 3. runsc
ensure_runsc() {
	local want="$RC_RUNSC_PKG@$RC_RUNSC_VERSION"
	if [[ -x $RC_RUNSC && -f $RC_RUNSC_STAMP && $(<"$RC_RUNSC_STAMP") == "$want" ]]; then
		log "runsc ok ($RC_RUNSC_VERSION)"
		summary+=("runsc ok")
		return
	fi
	log "building runsc $want (CGO_ENABLED=0; about 2 minutes on a cold module cache)"
	local t tmp
	t=$(now_ms)
	mkdir -p "$RC_BIN"
	tmp=$(mktemp -d "$RC_PREFIX/.build.XXXXXX")
	cleanup+=("$tmp")
	CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-buildvcs=false go install "$want" </dev/null >&2 ||
		die "building runsc failed (go install $want)"
	# Replace atomically: running sandboxes keep the old inode.
	mv -f "$tmp/runsc" "$RC_RUNSC"
	printf '%s\n' "$want" >"$RC_RUNSC_STAMP"
	summary+=("runsc built ($((($(now_ms) - t) / 1000))s)")
}

# ---------------------------------------------------------------- 4. dockerd
daemon_json() {
	cat <<EOF
{
  "runtimes": {
    "runsc": {
      "path": "$RC_RUNSC",
      "runtimeArgs": ["--platform=systrap"]
    }
  },
  "default-runtime": "runsc",
  "bridge": "none",
  "iptables": true,
  "ip-forward": true,
  "ip-masq": true,
  "userland-proxy": false,
  "log-driver": "json-file",
  "log-opts": {"max-size": "16m", "max-file": "1"},
  "storage-driver": "overlay2"
}
EOF
}

stop_dockerd() {
	local pid
	pid=$(rc_dockerd_pid) || return 0
	log "stopping dockerd (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + 90))
	while [[ -d /proc/$pid ]] && ((SECONDS < deadline)); do sleep 0.2; done
	if [[ -d /proc/$pid ]]; then
		log "dockerd did not stop within 90s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		while [[ -d /proc/$pid ]]; do sleep 0.1; done
	fi
}

start_dockerd() {
	mkdir -p "$RC_RUN" "$RC_DATA_ROOT" "$RC_EXEC_ROOT" "$RC_LOGDIR"
	log "starting dockerd on $RC_DOCKER_HOST (log $RC_DOCKERD_LOG)"
	printf '\n==== %s setup.sh starting dockerd\n' "$(date -u +%FT%TZ)" >>"$RC_DOCKERD_LOG"
	# Fully detached: own session, no controlling terminal, stdin from
	# /dev/null, stdout/stderr to the log, and no other inherited descriptor
	# (make's jobserver pipes, a test harness's pipes) kept open.
	# Under tini -s (a child subreaper): every exited containerd shim would
	# otherwise be reparented to PID 1, which on these machines reaps late,
	# and zombies pile up (one per container) against pid_max.
	local reaper=()
	command -v tini >/dev/null && reaper=(tini -s --)
	(
		for fd in "/proc/$BASHPID/fd"/*; do
			fd=${fd##*/}
			((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
		done
		cd /
		exec setsid nohup env -i PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root \
			"${reaper[@]}" dockerd \
			--host "$RC_DOCKER_HOST" \
			--data-root "$RC_DATA_ROOT" \
			--exec-root "$RC_EXEC_ROOT" \
			--pidfile "$RC_PIDFILE" \
			--config-file "$RC_DAEMON_JSON" \
			</dev/null >>"$RC_DOCKERD_LOG" 2>&1
	) &
	local launcher=$! deadline=$((SECONDS + 60))
	until rc_engine_answers; do
		if ((SECONDS >= deadline)); then
			die "dockerd did not come up within 60s. Last lines of $RC_DOCKERD_LOG:
$(tail -n 40 "$RC_DOCKERD_LOG")"
		fi
		# The launcher execs (tini and) dockerd; setsid does not fork when
		# the caller is no group leader: stop early when it died.
		if ! kill -0 "$launcher" 2>/dev/null && ! rc_dockerd_pid >/dev/null; then
			die "dockerd exited during startup. Last lines of $RC_DOCKERD_LOG:
$(tail -n 40 "$RC_DOCKERD_LOG")"
		fi
		sleep 0.1
	done
	disown "$launcher" 2>/dev/null || true
}

ensure_dockerd() {
	mkdir -p "$RC_ETC" "$RC_RUN"
	local want have=""
	want=$(daemon_json)
	[[ -f $RC_DAEMON_JSON ]] && have=$(<"$RC_DAEMON_JSON")
	if [[ $want != "$have" ]]; then
		printf '%s\n' "$want" >"$RC_DAEMON_JSON.tmp"
		mv -f "$RC_DAEMON_JSON.tmp" "$RC_DAEMON_JSON"
		log "wrote $RC_DAEMON_JSON"
	fi
	local sum running_sum=""
	sum=$(sha256sum <"$RC_DAEMON_JSON" | cut -d' ' -f1)
	[[ -f $RC_CONFIG_STAMP ]] && running_sum=$(<"$RC_CONFIG_STAMP")

	if rc_engine_answers; then
		if [[ $sum == "$running_sum" ]]; then
			log "dockerd ok (pid $(rc_dockerd_pid || echo '?'))"
			summary+=("dockerd running")
			check_containerd
			return
		fi
		# Some settings (bridge, storage) are not reloadable with SIGHUP: restart.
		rc_dockerd_pid >/dev/null ||
			die "something answers on $RC_SOCK with another configuration, but $RC_PIDFILE names no dockerd: stop it by hand"
		log "dockerd configuration changed: restarting it"
		stop_dockerd
		start_dockerd
		printf '%s\n' "$sum" >"$RC_CONFIG_STAMP"
		summary+=("dockerd restarted (config changed)")
	else
		# Not answering: a hung or half-started daemon from our pidfile goes first.
		stop_dockerd
		local t
		t=$(now_ms)
		start_dockerd
		printf '%s\n' "$sum" >"$RC_CONFIG_STAMP"
		summary+=("dockerd started ($(($(now_ms) - t))ms)")
	fi
	check_containerd
}

# dockerd starts and supervises its own containerd (state under the exec root)
# unless a system containerd answers on /run/containerd/containerd.sock.
check_containerd() {
	local v
	v=$(rc_docker version --format '{{range .Server.Components}}{{if eq .Name "containerd"}}{{.Version}}{{end}}{{end}}' 2>/dev/null || true)
	[[ -n $v ]] || die "dockerd answers but reports no containerd; see $RC_DOCKERD_LOG"
}

# ---------------------------------------------------------------- 5. network
# Ranges a sandbox must never reach: private, loopback, link-local (cloud
# metadata), CGNAT, "this network", IETF protocol assignments, benchmarking,
# multicast and reserved; plus the subnets the machine itself is attached to.
BLOCKED_RANGES=(0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12
	192.0.0.0/24 192.168.0.0/16 198.18.0.0/15 224.0.0.0/4 240.0.0.0/4)

uplink_subnets() {
	# Every directly connected IPv4 subnet of the machine (proto kernel scope
	# link routes), except the sandbox bridge itself.
	ip -4 route show proto kernel scope link 2>/dev/null |
		awk -v br="$RC_NET_BRIDGE" '{dev=""; for (i=1;i<NF;i++) if ($i=="dev") dev=$(i+1); if (dev!=br && $1 ~ /^[0-9.]+\/[0-9]+$/) print $1}' |
		sort -u
}

uplink_mtu() {
	local dev
	dev=$(ip -4 route show default 2>/dev/null | awk '{for (i=1;i<NF;i++) if ($i=="dev") {print $(i+1); exit}}')
	[[ -n $dev ]] && cat "/sys/class/net/$dev/mtu" 2>/dev/null || echo 1500
}

fw_added=0
# fw TOOL CHAIN RULE... : insert the rule at the top unless it is already there.
fw() {
	local tool=$1 chain=$2
	shift 2
	if ! "$tool" -w -C "$chain" "$@" 2>/dev/null; then
		"$tool" -w -I "$chain" "$@" || die "$tool -I $chain $* failed"
		fw_added=$((fw_added + 1))
	fi
}

ensure_firewall() {
	command -v iptables >/dev/null || die "iptables missing"
	local ipt_v
	ipt_v=$(iptables -V 2>/dev/null || true)
	[[ $ipt_v == *nf_tables* ]] || log "warning: iptables is '$ipt_v', expected the nf_tables backend Docker uses here"
	# DOCKER-USER is created by dockerd (with the jump from FORWARD). Create it
	# the same way if this dockerd did not yet (dockerd keeps what is there).
	if ! iptables -w -n -L DOCKER-USER >/dev/null 2>&1; then
		iptables -w -N DOCKER-USER
		iptables -w -A DOCKER-USER -j RETURN
		iptables -w -C FORWARD -j DOCKER-USER 2>/dev/null || iptables -w -I FORWARD -j DOCKER-USER
	fi
	local c=(-m comment --comment "$RC_FW_COMMENT") r
	# The host itself (gateway, every host address, any service bound to 0.0.0.0).
	fw iptables INPUT -i "$RC_NET_BRIDGE" "${c[@]}" -j REJECT --reject-with icmp-port-unreachable
	if command -v ip6tables >/dev/null && ip6tables -w -n -L INPUT >/dev/null 2>&1; then
		fw ip6tables INPUT -i "$RC_NET_BRIDGE" "${c[@]}" -j REJECT --reject-with icmp6-port-unreachable
		fw ip6tables FORWARD -i "$RC_NET_BRIDGE" "${c[@]}" -j REJECT --reject-with icmp6-adm-prohibited
		fw ip6tables FORWARD -o "$RC_NET_BRIDGE" "${c[@]}" -j DROP
	fi
	# Forwarded: nothing new reaches a sandbox from outside ...
	fw iptables DOCKER-USER -o "$RC_NET_BRIDGE" -m conntrack ! --ctstate RELATED,ESTABLISHED "${c[@]}" -j DROP
	# ... and a sandbox reaches no private/reserved range and no subnet of ours.
	local ranges=("${BLOCKED_RANGES[@]}")
	while read -r r; do [[ -n $r ]] && ranges+=("$r"); done < <(uplink_subnets)
	for r in "${ranges[@]}"; do
		fw iptables DOCKER-USER -i "$RC_NET_BRIDGE" -d "$r" "${c[@]}" -j REJECT --reject-with icmp-net-prohibited
	done
	FW_RANGES=("${ranges[@]}")
}

ensure_network() {
	local mtu want_opts got
	mtu=$(uplink_mtu)
	want_opts="$RC_NET_SUBNET $RC_NET_GATEWAY $RC_NET_BRIDGE false $mtu"
	got=$(rc_docker network inspect "$RC_NET_NAME" --format \
		'{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}}{{end}} {{index .Options "com.docker.network.bridge.name"}} {{index .Options "com.docker.network.bridge.enable_icc"}} {{index .Options "com.docker.network.driver.mtu"}}' 2>/dev/null || true)
	local action=ok
	if [[ -n $got && $got != "$want_opts" ]]; then
		local n
		n=$(rc_docker network inspect "$RC_NET_NAME" --format '{{len .Containers}}')
		[[ $n == 0 ]] || die "network $RC_NET_NAME exists with other settings ($got, want $want_opts) and has $n containers attached; remove them and rerun"
		log "recreating network $RC_NET_NAME ($got -> $want_opts)"
		rc_docker network rm "$RC_NET_NAME" >/dev/null
		got=""
		action=recreated
	fi
	if [[ -z $got ]]; then
		[[ $action == ok ]] && action=created
		rc_docker network create --driver bridge \
			--subnet "$RC_NET_SUBNET" --gateway "$RC_NET_GATEWAY" \
			-o com.docker.network.bridge.name="$RC_NET_BRIDGE" \
			-o com.docker.network.bridge.enable_icc=false \
			-o com.docker.network.driver.mtu="$mtu" \
			--label io.rarecloud.managed=true \
			"$RC_NET_NAME" >/dev/null || die "docker network create $RC_NET_NAME failed"
	fi
	# icc=false and the DOCKER-USER rules need bridged traffic to pass iptables.
	local nf=/proc/sys/net/bridge/bridge-nf-call-iptables
	[[ -e $nf ]] || modprobe br_netfilter 2>/dev/null || true
	if [[ ! -e $nf || $(<"$nf") != 1 ]]; then
		sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null ||
			die "net.bridge.bridge-nf-call-iptables is not 1 and cannot be set (br_netfilter)"
	fi

	local json
	json=$(
		printf '{\n  "network": "%s",\n  "bridge": "%s",\n  "subnet": "%s",\n  "gateway": "%s",\n  "mtu": %s,\n  "blocked": [' \
			"$RC_NET_NAME" "$RC_NET_BRIDGE" "$RC_NET_SUBNET" "$RC_NET_GATEWAY" "$mtu"
		local first=1 r
		for r in "${FW_RANGES[@]}"; do
			((first)) || printf ', '
			printf '"%s"' "$r"
			first=0
		done
		printf '],\n  "engine": "%s"\n}\n' "$RC_DOCKER_HOST"
	)
	if [[ ! -f $RC_NETWORK_JSON || $(<"$RC_NETWORK_JSON") != "$json" ]]; then
		printf '%s\n' "$json" >"$RC_NETWORK_JSON.tmp"
		mv -f "$RC_NETWORK_JSON.tmp" "$RC_NETWORK_JSON"
	fi
	local fwmsg="firewall ok"
	((fw_added == 0)) || fwmsg="firewall +$fw_added rules"
	log "network $RC_NET_NAME $action (mtu $mtu), $fwmsg"
	if [[ $action == ok && $fw_added == 0 ]]; then
		summary+=("network ok")
	else
		summary+=("network $action, $fwmsg")
	fi
}

# ---------------------------------------------------------------- 6. images
ensure_images() {
	local jobs=${RC_IMAGE_JOBS:-3} force=() t out
	[[ ${RC_FORCE_IMAGES:-} == 1 ]] && force=(--force)
	local build=$repo/testbackend/images/build.sh
	t=$(now_ms)
	local tmp
	tmp=$(mktemp -d)
	cleanup+=("$tmp")
	local pids=() tpl i=0 failed=0
	for tpl in "${RC_TEMPLATES[@]}"; do
		if ((jobs > 1)); then
			"$build" "${force[@]}" "$tpl" >"$tmp/$tpl.out" &
			pids+=($!)
			# Bounded parallelism: wait for the oldest when the pool is full.
			if ((${#pids[@]} - i >= jobs)); then
				wait "${pids[$i]}" || failed=1
				i=$((i + 1))
			fi
		else
			"$build" "${force[@]}" "$tpl" >"$tmp/$tpl.out" || failed=1
		fi
	done
	for ((; i < ${#pids[@]}; i++)); do wait "${pids[$i]}" || failed=1; done
	((failed == 0)) || die "image build failed (see messages above)"
	local built=() fresh=()
	for tpl in "${RC_TEMPLATES[@]}"; do
		out=$(<"$tmp/$tpl.out")
		case $out in
		*" built "*)
			read -r _ _ secs size <<<"$out"
			built+=("$tpl ($secs, $size)")
			;;
		*) fresh+=("$tpl") ;;
		esac
	done
	local msg="images:"
	((${#built[@]} == 0)) || msg+=" built ${built[*]}"
	if ((${#fresh[@]} > 0)); then
		((${#built[@]} == 0)) || msg+=","
		local IFS=/
		msg+=" ${fresh[*]} up to date"
	fi
	((${#built[@]} == 0)) || msg+=" in $((($(now_ms) - t) / 1000))s total"
	summary+=("$msg")
}

check_tools
ensure_packages
ensure_runsc
ensure_dockerd
ensure_firewall
ensure_network
ensure_images

total=$(($(now_ms) - t0))
line="setup:"
for s in "${summary[@]}"; do
	[[ $line == "setup:" ]] && line+=" $s" || line+="; $s"
done
printf '%s (%d.%ds)\n' "$line" $((total / 1000)) $((total % 1000 / 100))
