#!/usr/bin/env bash
# make setup: prepares this machine for the RareCloud test backend.
#
#   1. checks terraform and go
#   2. installs the apt packages that are missing (no apt at all when none is)
#   3. builds the pinned runsc (gVisor) into /usr/local/lib/rarecloud/bin,
#      in the background while steps 4-7 run up to the images' smoke tests
#   4. starts our own dockerd on unix:///run/rarecloud/docker.sock with runsc
#   5. creates the sandbox network rarecloud-sandbox and its firewall rules
#   6. runs the sandboxes' DNS forwarder (dnsmasq on the bridge gateway only)
#   7. builds the template images rarecloud/sandbox-{base,python,node}:latest
#      (their root filesystems while runsc builds, then smoke tests under it)
#   8. starts building the pinned OpenTofu CLI into
#      /usr/local/lib/rarecloud/bin/tofu in the background once sandboxes
#      can run; the build outlives setup, and `setup.sh --wait-tofu`
#      (make test, make demo TF=tofu) waits for it
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

# The sandboxes' DNS forwarder (teardown.sh names the same files).
RC_DNS=$RC_NET_GATEWAY
RC_DNSMASQ_CONF=$RC_ETC/dnsmasq.conf
RC_DNSMASQ_PID=$RC_RUN/dnsmasq.pid
RC_DNSMASQ_STAMP=$RC_RUN/dnsmasq.conf.sha256
RC_DNSMASQ_LOG=$RC_LOGDIR/dnsmasq.log
# A name the forwarder answers itself (a documentation address, never
# forwarded): the runtime tests resolve it from inside a sandbox.
RC_DNS_CHECK_NAME=rarecloud-dns-check.internal
RC_DNS_CHECK_ADDR=198.51.100.53

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
	# The oldest Terraform every tested feature needs: ephemeral resources
	# (1.10) and write-only arguments such as env_wo (1.11). An older one
	# would make their acceptance tests skip, so it is refused.
	local tfmin=1.11.0 tfnum=${tfv#Terraform v}
	if [[ ! $tfnum =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || [[ $(printf '%s\n' "$tfmin" "$tfnum" | sort -V | head -n1) != "$tfmin" ]]; then
		die "Terraform $tfmin or newer is needed (ephemeral resources, write-only arguments such as env_wo), found '${tfv:-unknown}' at $(command -v terraform): put Terraform 1.11.x first on PATH"
	fi
	command -v go >/dev/null || die "go is not on PATH (expected /usr/local/go/bin/go); it is needed to build runsc and the provider"
	log "tools ok: ${tfv:-terraform}, $(go version | awk '{print $3}')"
}

# ---------------------------------------------------------------- 2. packages
PACKAGES=(docker.io containerd runc tini mmdebstrap busybox-static iptables iproute2 ca-certificates util-linux procps dnsmasq-base
	gnupg unzip) # the last two for make release-check

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
# start_runsc starts building the pinned runsc in the background unless it
# is installed; wait_runsc waits for that build and installs its binary.
# Nothing before the images' smoke tests needs runsc (dockerd only names
# its path), so the engine, the network and the images' root filesystems
# are made while it builds.
runsc_pid="" runsc_tmp="" runsc_t=0
RC_RUNSC_LOG=$RC_LOGDIR/build-runsc.log
start_runsc() {
	local want="$RC_RUNSC_PKG@$RC_RUNSC_VERSION"
	if [[ -x $RC_RUNSC && -f $RC_RUNSC_STAMP && $(<"$RC_RUNSC_STAMP") == "$want" ]]; then
		log "runsc ok ($RC_RUNSC_VERSION)"
		summary+=("runsc ok")
		return
	fi
	log "building runsc $want in the background (CGO_ENABLED=0; about 2 minutes on a cold module cache; log $RC_RUNSC_LOG)"
	runsc_t=$(now_ms)
	mkdir -p "$RC_BIN" "$RC_LOGDIR"
	runsc_tmp=$(mktemp -d "$RC_PREFIX/.build.XXXXXX")
	cleanup+=("$runsc_tmp")
	# dockerd refuses to start when a runtime's path does not exist; until
	# the build replaces it, a stand-in says why it cannot run anything.
	if [[ ! -e $RC_RUNSC ]]; then
		printf '#!/bin/sh\necho "runsc is not built yet: run make setup (scripts/setup.sh builds it)" >&2\nexit 1\n' >"$runsc_tmp/stand-in"
		chmod 0755 "$runsc_tmp/stand-in"
		mv -f "$runsc_tmp/stand-in" "$RC_RUNSC"
	fi
	# CGO_ENABLED=0 -trimpath, as the other tools' builds (OpenTofu below,
	# scripts/tool.sh) and every Go build make runs (GNUmakefile): Go's build cache
	# is shared only by builds with the same flags, and on a fresh machine
	# they compile the standard library and some modules (protobuf, gRPC)
	# once for all of them.
	CGO_ENABLED=0 GOBIN="$runsc_tmp" GOFLAGS=-buildvcs=false go install -trimpath "$want" </dev/null >"$RC_RUNSC_LOG" 2>&1 &
	runsc_pid=$!
}

wait_runsc() {
	[[ -n $runsc_pid ]] || return 0
	local want="$RC_RUNSC_PKG@$RC_RUNSC_VERSION"
	wait "$runsc_pid" || die "building runsc failed (go install $want; log $RC_RUNSC_LOG):
$(tail -n 20 "$RC_RUNSC_LOG")"
	runsc_pid=""
	# Replace atomically: running sandboxes keep the old inode.
	mv -f "$runsc_tmp/runsc" "$RC_RUNSC"
	printf '%s\n' "$want" >"$RC_RUNSC_STAMP"
	summary+=("runsc built ($((($(now_ms) - runsc_t) / 1000))s)")
}

# ---------------------------------------------------------------- 4. dockerd
daemon_json() {
	cat <<EOF
{
  "runtimes": {
    "runsc": {
      "path": "$RC_RUNSC_WRAPPER"
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
	while rc_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
	if rc_alive "$pid"; then
		log "dockerd did not stop within 90s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		while rc_alive "$pid"; do sleep 0.1; done
	fi
}

# clear_stale_pidfiles removes the pid files of a dockerd or containerd
# that is gone (or lingers as a zombie): left behind, they make the next
# dockerd believe the old one still runs, and it refuses to start or waits
# for a containerd that never answers.
clear_stale_pidfiles() {
	local f pid
	for f in "$RC_PIDFILE" "$RC_EXEC_ROOT/containerd/containerd.pid"; do
		[[ -f $f ]] || continue
		pid=$(<"$f") || continue
		pid=${pid//[^0-9]/}
		if [[ -z $pid ]] || ! rc_alive "$pid"; then
			log "removing stale pid file $f"
			rm -f "$f"
		fi
	done
}

start_dockerd() {
	mkdir -p "$RC_RUN" "$RC_DATA_ROOT" "$RC_EXEC_ROOT" "$RC_LOGDIR"
	clear_stale_pidfiles
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

# ensure_wrapper builds the runtime wrapper (cmd/rarecloud-runsc: it runs runsc
# with the platform flag, and joins a sandbox to the network namespace the
# backend wired for it) and writes the script the engine runs as its
# runtime, which calls the wrapper for "create" and runsc for the rest;
# each is replaced only when it changed.
#
# The runtime's calls that start and end sandboxes (create, start, kill,
# delete, state) run at RC_RUNTIME_NICE: a start is most of a CPU-second
# of runsc outside any sandbox's cgroup, which no account's CPU share
# counts, and at the host's priority it took the CPU from other accounts'
# commands (testbackend/cmd/rarecloud-bench/results/README.md, "The
# runtime yields").
# The sandbox's own processes inherit the niceness, which weighs nothing
# against other cgroups: each sandbox's weight is its cgroup's. "exec"
# runs a command (without the agent) and keeps the host's priority.
RC_RUNTIME_NICE=10
# RC_RUNSC_FLAGS are the flags of every runsc call; the create wrapper
# (cmd/rarecloud-runsc, runscFlags) passes the same. Systrap's fast path
# spins a sandbox's threads while they wait for each other: gVisor turns it
# off on one CPU, and every sandbox here is held to its vCPUs by a CPU
# quota, which the spinning spent (measured: process starts in a 1-vCPU
# sandbox cost a quarter to two fifths less CPU without it, and commands
# through the API answered a sixth sooner at the median;
# testbackend/cmd/rarecloud-bench/results/README.md, "In rounds, and
# systrap's fast path off").
RC_RUNSC_FLAGS="--platform=systrap --systrap-disable-fast-path"
runtime_script() {
	cat <<EOF
#!/bin/sh
# The OCI runtime "runsc" of the engine scripts/setup.sh starts (written by it).
case " \$* " in
*" create "*) exec nice -n $RC_RUNTIME_NICE $RC_RUNSC_CREATE "\$@" ;;
*" exec "*) exec $RC_RUNSC $RC_RUNSC_FLAGS "\$@" ;;
esac
exec nice -n $RC_RUNTIME_NICE $RC_RUNSC $RC_RUNSC_FLAGS "\$@"
EOF
}

ensure_wrapper() {
	local tmp changed=0
	mkdir -p "$RC_BIN"
	tmp=$(mktemp "$RC_BIN/.rarecloud-runsc.XXXXXX")
	cleanup+=("$tmp")
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$tmp" ./testbackend/cmd/rarecloud-runsc) ||
		die "building the runtime wrapper (go build ./testbackend/cmd/rarecloud-runsc) failed"
	if ! { [[ -x $RC_RUNSC_CREATE ]] && cmp -s "$tmp" "$RC_RUNSC_CREATE"; }; then
		chmod 0755 "$tmp"
		mv -f "$tmp" "$RC_RUNSC_CREATE"
		changed=1
	fi
	if [[ ! -x $RC_RUNSC_WRAPPER || $(<"$RC_RUNSC_WRAPPER") != "$(runtime_script)" ]]; then
		runtime_script >"$RC_RUNSC_WRAPPER.tmp"
		chmod 0755 "$RC_RUNSC_WRAPPER.tmp"
		mv -f "$RC_RUNSC_WRAPPER.tmp" "$RC_RUNSC_WRAPPER"
		changed=1
	fi
	if ((changed)); then
		log "installed the runtime $RC_RUNSC_WRAPPER (and $RC_RUNSC_CREATE)"
		summary+=("runtime wrapper installed")
	else
		summary+=("runtime wrapper ok")
	fi
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
	# The host itself (gateway, every host address, any service bound to 0.0.0.0) ...
	fw iptables INPUT -i "$RC_NET_BRIDGE" "${c[@]}" -j REJECT --reject-with icmp-port-unreachable
	# ... except DNS to the forwarder on the gateway (section 6).
	ensure_dns_accept
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

# dns_accepts_first succeeds when INPUT accepts udp and tcp 53 from the
# bridge to the forwarder before its first reject or drop of the bridge.
dns_accepts_first() {
	iptables -w -S INPUT 2>/dev/null | awk -v br="-i $RC_NET_BRIDGE " -v dst="-d $RC_DNS/32 " '
		index($0, br) == 0 { next }
		/ -j ACCEPT$/ && index($0, dst) && / --dport 53 / {
			if (/ -p udp /) u = 1
			if (/ -p tcp /) t = 1
			next
		}
		/ -j (REJECT|DROP)( |$)/ { exit }
		END { exit !(u && t) }'
}

# ensure_dns_accept lets sandboxes reach the forwarder and nothing else on the
# host: udp and tcp 53 to the gateway address only. fw inserts at the top, so a
# reject inserted after these would shadow them: when they are missing or not
# ahead of it, they are (re)inserted at the top.
ensure_dns_accept() {
	dns_accepts_first && return 0
	local p spec
	for p in tcp udp; do
		spec=(-d "$RC_DNS/32" -i "$RC_NET_BRIDGE" -p "$p" -m "$p" --dport 53 -m comment --comment "$RC_FW_COMMENT" -j ACCEPT)
		while iptables -w -D INPUT "${spec[@]}" 2>/dev/null; do :; done
		iptables -w -I INPUT 1 "${spec[@]}" || die "iptables -I INPUT 1 ${spec[*]} failed"
		fw_added=$((fw_added + 1))
	done
	dns_accepts_first || die "the DNS accept rules are not ahead of the INPUT reject for $RC_NET_BRIDGE (iptables -S INPUT)"
}

ensure_network() {
	local mtu want_opts got
	mtu=$(uplink_mtu)
	want_opts="$RC_NET_SUBNET $RC_NET_GATEWAY $RC_NET_IPAM_RANGE $RC_NET_BRIDGE false $mtu"
	got=$(rc_docker network inspect "$RC_NET_NAME" --format \
		'{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}} {{.IPRange}}{{end}} {{index .Options "com.docker.network.bridge.name"}} {{index .Options "com.docker.network.bridge.enable_icc"}} {{index .Options "com.docker.network.driver.mtu"}}' 2>/dev/null || true)
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
			--subnet "$RC_NET_SUBNET" --gateway "$RC_NET_GATEWAY" --ip-range "$RC_NET_IPAM_RANGE" \
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

	# The description every part of the backend reads (testbackend/hostnet),
	# written through that type.
	local blocked
	blocked=$(IFS=,; printf '%s' "${FW_RANGES[*]}")
	(cd "$repo" && go run ./testbackend/cmd/rarecloud-netfile -out "$RC_NETWORK_JSON" \
		-network "$RC_NET_NAME" -bridge "$RC_NET_BRIDGE" -subnet "$RC_NET_SUBNET" -gateway "$RC_NET_GATEWAY" \
		-ipam-range "$RC_NET_IPAM_RANGE" -netns -dns "$RC_DNS" -mtu "$mtu" -blocked "$blocked" \
		-engine "$RC_DOCKER_HOST") >/dev/null || die "writing $RC_NETWORK_JSON (go run ./testbackend/cmd/rarecloud-netfile) failed"
	local fwmsg="firewall ok"
	((fw_added == 0)) || fwmsg="firewall +$fw_added rules"
	log "network $RC_NET_NAME $action (mtu $mtu), $fwmsg"
	if [[ $action == ok && $fw_added == 0 ]]; then
		summary+=("network ok")
	else
		summary+=("network $action, $fwmsg")
	fi
}

# ---------------------------------------------------------------- 6. DNS
# Docker puts "nameserver 127.0.0.11" (its embedded resolver) into the
# resolv.conf of a container on a user-defined network, and under gVisor's
# own network stack that is the sandbox's own loopback; the machine's resolver
# is in a blocked range. So sandboxes get a forwarder of their own: dnsmasq,
# bound to the gateway address only (bind-dynamic: it follows the address when
# the bridge is re-created), forwarding to the host's resolvers. The runtime
# mounts a resolv.conf that names it (network.json "dns").

DNS_UPSTREAM=()      # dnsmasq lines naming the upstreams
DNS_UPSTREAM_DESC="" # the same, for people

# dns_upstreams picks the host's resolvers from /etc/resolv.conf. Loopback
# stubs are skipped when real servers are listed; a host with only a stub
# (systemd-resolved, a local cache) is followed through a resolv-file
# instead, which dnsmasq re-reads when it changes.
dns_upstreams() {
	local kw addr _ servers=() stubs=()
	if [[ -r /etc/resolv.conf ]]; then
		while read -r kw addr _; do
			[[ $kw == nameserver && -n $addr ]] || continue
			case $addr in
			127.* | ::1) stubs+=("$addr") ;;
			*%*) log "dns: skipping scoped upstream $addr" ;;
			*) servers+=("$addr") ;;
			esac
		done </etc/resolv.conf
	fi
	DNS_UPSTREAM=()
	if ((${#servers[@]} > 0)); then
		DNS_UPSTREAM+=(no-resolv)
		for addr in "${servers[@]}"; do DNS_UPSTREAM+=("server=$addr"); done
		DNS_UPSTREAM_DESC="upstream ${servers[*]}"
	elif ((${#stubs[@]} > 0)); then
		local f=/etc/resolv.conf
		# systemd-resolved lists the real servers here (its stub is 127.0.0.53).
		if [[ -r /run/systemd/resolve/resolv.conf ]] &&
			awk '$1 == "nameserver" && $2 !~ /^127\./ && $2 != "::1" {found = 1} END {exit !found}' /run/systemd/resolve/resolv.conf; then
			f=/run/systemd/resolve/resolv.conf
		fi
		DNS_UPSTREAM+=("resolv-file=$f")
		DNS_UPSTREAM_DESC="upstream from $f"
	else
		log "warning: /etc/resolv.conf names no resolver: sandboxes resolve only the names the forwarder answers itself"
		DNS_UPSTREAM+=(no-resolv)
		DNS_UPSTREAM_DESC="no upstream"
	fi
}

dnsmasq_conf() {
	cat <<EOF
# Written by scripts/setup.sh (the next run overwrites it): the DNS forwarder
# for sandboxes on $RC_NET_NAME. Listens on $RC_DNS port 53 only
# (udp and tcp); the firewall admits sandboxes to that and nothing else on
# the host.
port=53
listen-address=$RC_DNS
except-interface=lo
bind-dynamic
no-dhcp-interface=$RC_NET_BRIDGE
pid-file=$RC_DNSMASQ_PID
log-facility=$RC_DNSMASQ_LOG
no-hosts
cache-size=1000
# No bare names and no reverse lookups of private ranges go upstream, and
# upstream answers that point into private or loopback ranges are dropped:
# a sandbox learns no internal address through DNS.
domain-needed
bogus-priv
stop-dns-rebind
# *.internal never leaves this machine; the check name is answered here.
local=/internal/
address=/$RC_DNS_CHECK_NAME/$RC_DNS_CHECK_ADDR
EOF
	printf '%s\n' "${DNS_UPSTREAM[@]}"
}

# dnsmasq_pid prints the pid of the dnsmasq that setup started (the pidfile
# names a live dnsmasq running our configuration file) and fails otherwise.
dnsmasq_pid() {
	local pid
	[[ -r $RC_DNSMASQ_PID ]] || return 1
	pid=$(<"$RC_DNSMASQ_PID") || return 1
	pid=${pid//[^0-9]/}
	[[ -n $pid ]] && rc_alive "$pid" || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == dnsmasq ]] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "--conf-file=$RC_DNSMASQ_CONF" || return 1
	printf '%s\n' "$pid"
}

# running PID: the process exists and is no zombie (dnsmasq daemonizes, so
# its parent is PID 1, which on these machines reaps late).
running() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $st && ${st:0:1} != Z ]]
}

stop_dnsmasq() {
	local pid=$1 deadline=$((SECONDS + 10))
	kill -TERM "$pid" 2>/dev/null || true
	while running "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
	if running "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
		while running "$pid"; do sleep 0.05; done
	fi
}

# dns_listening succeeds when something listens on the forwarder's address,
# port 53, for both udp and tcp.
dns_listening() {
	local out
	out=$(ss -Hlnut 'sport = :53' 2>/dev/null) || return 1
	grep -q "^udp .* $RC_DNS:53 " <<<"$out" && grep -q "^tcp .* $RC_DNS:53 " <<<"$out"
}

start_dnsmasq() {
	mkdir -p "$RC_RUN" "$RC_LOGDIR"
	local out
	out=$(mktemp)
	cleanup+=("$out")
	printf '\n==== %s setup.sh starting dnsmasq\n' "$(date -u +%FT%TZ)" >>"$RC_DNSMASQ_LOG"
	# dnsmasq daemonizes itself once it listens, and exits non-zero with the
	# reason on stderr when it cannot (the address is taken, say). Nothing
	# inherited stays open in it (make's jobserver pipes, a harness's pipes).
	if ! (
		for fd in "/proc/$BASHPID/fd"/*; do
			fd=${fd##*/}
			((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
		done
		cd /
		exec env -i PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
			dnsmasq --conf-file="$RC_DNSMASQ_CONF" </dev/null >"$out" 2>&1
	); then
		die "dnsmasq did not start: $(<"$out")"
	fi
	local deadline=$((SECONDS + 10))
	until dnsmasq_pid >/dev/null && dns_listening; do
		((SECONDS < deadline)) || die "dnsmasq started but does not listen on $RC_DNS:53 (udp and tcp). $(<"$out")
Last lines of $RC_DNSMASQ_LOG:
$(tail -n 20 "$RC_DNSMASQ_LOG")"
		sleep 0.1
	done
}

ensure_dns() {
	command -v dnsmasq >/dev/null || die "dnsmasq missing (package dnsmasq-base)"
	mkdir -p "$RC_ETC" "$RC_RUN" "$RC_LOGDIR"
	dns_upstreams
	local want have=""
	want=$(dnsmasq_conf)
	[[ -f $RC_DNSMASQ_CONF ]] && have=$(<"$RC_DNSMASQ_CONF")
	if [[ $want != "$have" ]]; then
		printf '%s\n' "$want" >"$RC_DNSMASQ_CONF.tmp"
		# Checked before it replaces the file: a running forwarder keeps
		# serving when the new configuration is wrong.
		local err
		err=$(dnsmasq --test --conf-file="$RC_DNSMASQ_CONF.tmp" 2>&1) ||
			die "the generated dnsmasq configuration is invalid ($RC_DNSMASQ_CONF.tmp): $err"
		mv -f "$RC_DNSMASQ_CONF.tmp" "$RC_DNSMASQ_CONF"
		log "wrote $RC_DNSMASQ_CONF"
	fi
	local sum running_sum="" pid action t
	sum=$(sha256sum <"$RC_DNSMASQ_CONF" | cut -d' ' -f1)
	[[ -f $RC_DNSMASQ_STAMP ]] && running_sum=$(<"$RC_DNSMASQ_STAMP")
	t=$(now_ms)
	if pid=$(dnsmasq_pid); then
		if [[ $sum == "$running_sum" ]] && dns_listening; then
			log "dns ok: dnsmasq (pid $pid) on $RC_DNS:53, $DNS_UPSTREAM_DESC"
			summary+=("dns ok")
			return
		fi
		log "dnsmasq configuration changed (or it does not listen): restarting it"
		stop_dnsmasq "$pid"
		action="restarted"
	else
		action="started"
	fi
	start_dnsmasq
	printf '%s\n' "$sum" >"$RC_DNSMASQ_STAMP"
	log "dns $action: dnsmasq (pid $(dnsmasq_pid)) on $RC_DNS:53, $DNS_UPSTREAM_DESC (log $RC_DNSMASQ_LOG)"
	summary+=("dns $action on $RC_DNS:53, $DNS_UPSTREAM_DESC ($(($(now_ms) - t))ms)")
}

# ---------------------------------------------------------------- egress control
# egressMode DENY_ALL / ALLOW_LIST (testbackend/egress): each backend keeps
# an nftables table of its own (the nft command, package nftables) and
# redirects the DNS of restricted sandboxes (DNAT from the gateway's port 53)
# to a forwarder of its own on the gateway. INPUT admits that redirected
# traffic, and only it, ahead of the bridge's reject.
PACKAGES+=(nftables)

ensure_egress() {
	command -v nft >/dev/null || die "nft missing (package nftables): egress control needs it"
	# Redirected to the gateway from the gateway (port 53): no other rule
	# DNATs there. No "-i": the bridge's accepts are its DNS ones alone.
	local spec=(-d "$RC_NET_GATEWAY/32" -m conntrack --ctstate DNAT --ctorigdst "$RC_NET_GATEWAY/32" -m comment --comment "$RC_FW_COMMENT" -j ACCEPT)
	if egress_accept_first; then
		summary+=("egress ok")
		return
	fi
	# Missing, or behind the bridge's reject (which shadows it: the backend
	# then refuses egress control): every copy goes, one goes on top.
	while iptables -w -D INPUT "${spec[@]}" 2>/dev/null; do :; done
	iptables -w -I INPUT 1 "${spec[@]}" || die "iptables -I INPUT 1 ${spec[*]} failed"
	egress_accept_first || die "the egress accept rule is not ahead of the INPUT reject for $RC_NET_BRIDGE (iptables -S INPUT)"
	log "egress control: INPUT accepts redirected DNS to $RC_NET_GATEWAY, ahead of the bridge's reject"
	summary+=("egress accept rule placed")
}

# egress_accept_first succeeds when INPUT accepts DNS redirected to the
# gateway before its first reject or drop of the bridge.
egress_accept_first() {
	iptables -w -S INPUT 2>/dev/null | awk -v br="-i $RC_NET_BRIDGE " -v gw="$RC_NET_GATEWAY" '
		/ --ctstate DNAT / && / -j ACCEPT$/ {
			for (i = 1; i < NF; i++)
				if ($i == "--ctorigdst" && ($(i + 1) == gw || $(i + 1) == gw "/32")) { found = 1; exit }
		}
		index($0, br) && / -j (REJECT|DROP)( |$)/ { exit }
		END { exit !found }'
}

# ---------------------------------------------------------------- 7. images
# The images are built in two stages (testbackend/images/build.sh): the
# root filesystems and their import while runsc still builds
# (stage_images, in the background), then the smoke tests under runsc
# (finish_images). RC_IMAGE_JOBS bounds how many are staged at once.
images_pid="" images_tmp="" images_t=0
stage_images() {
	local jobs=${RC_IMAGE_JOBS:-3} force=()
	[[ ${RC_FORCE_IMAGES:-} == 1 ]] && force=(--force)
	local build=$repo/testbackend/images/build.sh
	images_t=$(now_ms)
	images_tmp=$(mktemp -d)
	cleanup+=("$images_tmp")
	(
		pids=() i=0 failed=0
		for tpl in "${RC_TEMPLATES[@]}"; do
			"$build" "${force[@]}" --stage "$tpl" >"$images_tmp/$tpl.stage" &
			pids+=($!)
			# Bounded parallelism: wait for the oldest when the pool is full.
			if ((${#pids[@]} - i >= jobs)); then
				wait "${pids[$i]}" || failed=1
				i=$((i + 1))
			fi
		done
		for (( ; i < ${#pids[@]}; i++)); do wait "${pids[$i]}" || failed=1; done
		exit "$failed"
	) &
	images_pid=$!
}

finish_images() {
	wait "$images_pid" || die "image build failed (see messages above)"
	local build=$repo/testbackend/images/build.sh tpl out pids=() failed=0 p
	for tpl in "${RC_TEMPLATES[@]}"; do
		out=$(<"$images_tmp/$tpl.stage")
		if [[ $out == *" up to date" ]]; then
			echo "$out" >"$images_tmp/$tpl.out"
			continue
		fi
		"$build" --finish "$tpl" >"$images_tmp/$tpl.out" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || failed=1; done
	((failed == 0)) || die "image smoke test failed (see messages above)"
	local built=() fresh=() secs size
	for tpl in "${RC_TEMPLATES[@]}"; do
		out=$(<"$images_tmp/$tpl.out")
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
	((${#built[@]} == 0)) || msg+=" in $((($(now_ms) - images_t) / 1000))s total"
	summary+=("$msg")
}

# ---------------------------------------------------------------- 8. OpenTofu
# The acceptance tests also run under OpenTofu. No release site is
# reachable, so the pinned CLI is built from the Go module proxy: its go.mod
# has a replace line, so `go install` cannot build it; `go build ./cmd/tofu`
# inside the downloaded module can. version.dev=no makes it report the
# release version (as OpenTofu's own release build does).
RC_TOFU=$RC_BIN/tofu
RC_TOFU_MODULE=github.com/opentofu/opentofu
RC_TOFU_VERSION=1.12.6
# The build runs detached (its own session) and outlives setup: setup
# ends once the sandboxes can run, and what needs OpenTofu (make test's
# OpenTofu pass, make demo TF=tofu) first runs `setup.sh --wait-tofu`.
# Its directory keeps the log, the pid and the outcome.
RC_TOFU_BUILD=$RC_PREFIX/.tofu-build

tofu_ok() {
	# (A missing CLI configuration file makes it print a warning first.)
	# The output is read whole before it is matched: grep -q stops reading
	# at the match, and under pipefail the CLI's SIGPIPE would fail the
	# check and rebuild OpenTofu.
	local out
	[[ -x $RC_TOFU ]] && out=$(CHECKPOINT_DISABLE=1 "$RC_TOFU" version 2>/dev/null) &&
		grep -qx "OpenTofu v$RC_TOFU_VERSION" <<<"$out"
}

# tofu_building reports whether our background build runs (its pid, with
# the marker argument, so a reused pid never counts).
tofu_building() {
	local pid
	[[ -r $RC_TOFU_BUILD/pid ]] || return 1
	pid=$(<"$RC_TOFU_BUILD/pid")
	pid=${pid//[^0-9]/}
	[[ -n $pid ]] && { tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qx rarecloud-tofu-build
}

# start_tofu starts the build in the background (about 8 minutes of CPU
# with a cold cache) unless the CLI is there or a build already runs.
start_tofu() {
	if tofu_ok; then
		log "tofu ok ($RC_TOFU_VERSION)"
		summary+=("tofu ok")
		return
	fi
	if tofu_building; then
		log "OpenTofu $RC_TOFU_VERSION is being built in the background (log $RC_TOFU_BUILD/build.log)"
		summary+=("tofu $RC_TOFU_VERSION building in the background")
		return
	fi
	local dir
	dir=$(cd / && go mod download -json "$RC_TOFU_MODULE@v$RC_TOFU_VERSION" </dev/null | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -f $dir/go.mod ]] || die "go mod download $RC_TOFU_MODULE@v$RC_TOFU_VERSION failed"
	mkdir -p "$RC_BIN" "$RC_TOFU_BUILD"
	rm -f "$RC_TOFU_BUILD/status" "$RC_TOFU_BUILD/tofu" "$RC_TOFU_BUILD/pid"
	now_ms >"$RC_TOFU_BUILD/started"
	log "building OpenTofu $RC_TOFU_VERSION in the background (log $RC_TOFU_BUILD/build.log); make test and make demo TF=tofu wait for it"
	# The binary replaces the old one only when built and reporting the
	# pinned version; status says how it ended.
	setsid bash -c '
		echo $$ >"$2/pid"
		cd "$1" || exit 1
		if CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice -n 19 go build -trimpath \
			-ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
			-o "$2/tofu" ./cmd/tofu && mv -f "$2/tofu" "$3"; then
			echo ok >"$2/status"
		else
			echo failed >"$2/status"
		fi
	' rarecloud-tofu-build "$dir" "$RC_TOFU_BUILD" "$RC_TOFU" </dev/null >"$RC_TOFU_BUILD/build.log" 2>&1 &
	local i
	for ((i = 0; i < 100; i++)); do
		[[ -s $RC_TOFU_BUILD/pid ]] && break
		sleep 0.05
	done
	summary+=("tofu $RC_TOFU_VERSION building in the background")
}

# wait_tofu (setup.sh --wait-tofu) returns once the pinned OpenTofu CLI is
# installed: at once when it is, after the background build when one
# runs, after a build of its own otherwise.
wait_tofu() {
	tofu_ok && return 0
	tofu_building || start_tofu
	log "waiting for the OpenTofu build (log $RC_TOFU_BUILD/build.log)"
	# The outcome is the status file the build writes last; a build that
	# is gone without one (killed) failed.
	while [[ ! -s $RC_TOFU_BUILD/status ]]; do
		if ! tofu_building; then
			sleep 1 # it may have written status just now
			[[ -s $RC_TOFU_BUILD/status ]] || tofu_building || break
		fi
		sleep 1
	done
	if [[ $(cat "$RC_TOFU_BUILD/status" 2>/dev/null) != ok ]] || ! tofu_ok; then
		die "building OpenTofu $RC_TOFU_VERSION failed (log $RC_TOFU_BUILD/build.log):
$(tail -n 20 "$RC_TOFU_BUILD/build.log")"
	fi
	local started
	started=$(cat "$RC_TOFU_BUILD/started" 2>/dev/null || now_ms)
	log "tofu $RC_TOFU_VERSION built ($((($(now_ms) - started) / 1000))s after its build started)"
}

if [[ ${1:-} == --wait-tofu ]]; then
	wait_tofu
	exit 0
fi

check_tools
ensure_packages
start_runsc
ensure_wrapper
ensure_dockerd
ensure_firewall
ensure_network
ensure_dns
ensure_egress
stage_images
wait_runsc
finish_images
start_tofu

total=$(($(now_ms) - t0))
line="setup:"
for s in "${summary[@]}"; do
	[[ $line == "setup:" ]] && line+=" $s" || line+="; $s"
done
printf '%s (%d.%ds)\n' "$line" $((total / 1000)) $((total % 1000 / 100))
