# shellcheck shell=bash
# shellcheck disable=SC2034 # constants for the scripts that source this file
# Shared constants and helpers for scripts/setup.sh and scripts/teardown.sh.
# Source it; it defines no side effects beyond variables and functions.

RC_PREFIX=/usr/local/lib/rarecloud
RC_BIN=$RC_PREFIX/bin
RC_RUNSC=$RC_BIN/runsc
RC_RUNSC_STAMP=$RC_BIN/runsc.version
# The OCI runtime the engine runs: a shell script that runs runsc with the
# platform flag, and on "create" the wrapper RC_RUNSC_CREATE, which first
# joins a sandbox to the network namespace the backend wired for it
# (testbackend/ocispec). The script keeps the Go program's start off the
# runtime's other calls: per call, the Go program added 8.6-11.5 ms of CPU
# to runsc's own, the script 3.2-3.9 ms (measured here 2026-12-02).
RC_RUNSC_WRAPPER=$RC_BIN/rarecloud-runtime
RC_RUNSC_CREATE=$RC_BIN/rarecloud-runsc
RC_RUNSC_PKG=gvisor.dev/gvisor/runsc
RC_RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237

RC_RUN=/run/rarecloud
RC_SOCK=$RC_RUN/docker.sock
RC_DOCKER_HOST=unix://$RC_SOCK
RC_PIDFILE=$RC_RUN/docker.pid
RC_EXEC_ROOT=$RC_RUN/docker-exec
RC_CONFIG_STAMP=$RC_RUN/daemon.json.sha256
RC_DATA=/var/lib/rarecloud
RC_DATA_ROOT=$RC_DATA/docker
RC_ETC=/etc/rarecloud
RC_DAEMON_JSON=$RC_ETC/daemon.json
RC_NETWORK_JSON=$RC_ETC/network.json
RC_LOGDIR=/var/log/rarecloud
RC_DOCKERD_LOG=$RC_LOGDIR/dockerd.log

RC_NET_NAME=rarecloud-sandbox
RC_NET_BRIDGE=rcsbx0
RC_NET_SUBNET=172.30.99.0/24
RC_NET_GATEWAY=172.30.99.1
# The engine's own allocator hands out only this part of the subnet; the
# backends lease the rest to the sandboxes they wire themselves.
RC_NET_IPAM_RANGE=172.30.99.0/26
# Network namespaces of sandboxes and their address leases.
RC_NETNS_DIR=$RC_RUN/netns
RC_ADDR_DIR=$RC_RUN/addr
RC_FW_COMMENT=rarecloud-sandbox

RC_TEMPLATES=(base python node)

# A PATH that finds dockerd, containerd, iptables and go even when the caller's
# PATH is minimal (cron, CI, sudo).
export PATH="/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"

log() { printf '%s: %s\n' "${RC_PROG:-rarecloud}" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# now_ms prints a monotonic-enough wall clock in milliseconds.
now_ms() { date +%s%3N; }

# rc_docker runs the Docker CLI against our own engine only.
rc_docker() { docker -H "$RC_DOCKER_HOST" "$@"; }

# rc_dockerd_pid prints the pid of our dockerd if the pidfile names a live
# dockerd process, and fails otherwise.
rc_dockerd_pid() {
	local pid comm
	[[ -r $RC_PIDFILE ]] || return 1
	pid=$(<"$RC_PIDFILE") || return 1
	pid=${pid//[^0-9]/}
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	rc_alive "$pid" || return 1
	comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
	[[ $comm == dockerd ]] || return 1
	printf '%s\n' "$pid"
}

# rc_alive succeeds when the process exists and is not a zombie. PID 1 on
# these machines reaps late, so a killed daemon can linger as a zombie that
# still has its /proc entry (and its name) for a while.
rc_alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}

# rc_engine_answers succeeds when our socket answers with the runsc runtime
# registered at our path.
rc_engine_answers() {
	[[ -S $RC_SOCK ]] || return 1
	local rt
	rt=$(timeout 10 docker -H "$RC_DOCKER_HOST" info --format '{{json .Runtimes}}' 2>/dev/null) || return 1
	[[ $rt == *"\"runsc\""*"$RC_RUNSC_WRAPPER"* ]]
}
