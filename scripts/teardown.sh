#!/usr/bin/env bash
# make teardown: stops the dockerd and the sandboxes' DNS forwarder (dnsmasq)
# that scripts/setup.sh started (by their pidfiles) and waits until they are
# gone. Its containers stop with dockerd.
#
#   scripts/teardown.sh          stop them, keep images, data and rules
#   scripts/teardown.sh --purge  also delete its data root (images, networks,
#                                containers), run state, the firewall rules
#                                tagged rarecloud-sandbox (the DNS accepts
#                                among them) and /etc/rarecloud (with the
#                                dnsmasq configuration).
#                                The runsc binary stays (slow to rebuild).
set -euo pipefail

RC_PROG=teardown
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

# As in setup.sh.
RC_DNSMASQ_CONF=$RC_ETC/dnsmasq.conf
RC_DNSMASQ_PID=$RC_RUN/dnsmasq.pid
RC_DNSMASQ_STAMP=$RC_RUN/dnsmasq.conf.sha256

purge=0
case ${1:-} in
"") ;;
--purge) purge=1 ;;
*) die "usage: teardown.sh [--purge]" ;;
esac
[[ $(id -u) == 0 ]] || die "must run as root"

did=()
if pid=$(rc_dockerd_pid); then
	log "stopping dockerd (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	# dockerd stops its containers (up to its shutdown timeout) and its
	# supervised containerd before it exits.
	deadline=$((SECONDS + 90))
	while rc_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
	if rc_alive "$pid"; then
		log "dockerd still running after 90s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		while rc_alive "$pid"; do sleep 0.1; done
	fi
	did+=("dockerd stopped")
else
	did+=("dockerd not running")
fi
rm -f "$RC_CONFIG_STAMP"

# The network namespaces and address leases of sandboxes the backends wired
# themselves: their containers stopped with dockerd.
if [[ -d $RC_NETNS_DIR || -d $RC_ADDR_DIR ]]; then
	for f in "$RC_NETNS_DIR"/*; do
		[[ -e $f ]] || continue
		umount -l "$f" 2>/dev/null || true
		rm -f "$f"
	done
	rm -rf "$RC_ADDR_DIR"
	did+=("sandbox network namespaces removed")
fi

# The cgroup parents the backends put their sandboxes under
# (container/docker/cgroupparent.go), with the container cgroups a killed
# engine left in them: empty once dockerd stopped; rmdir leaves any that
# still holds a process.
for d in /sys/fs/cgroup/rarecloud-* /sys/fs/cgroup/*/rarecloud-*; do
	[[ -d $d ]] || continue
	for c in "$d"/*/; do [[ -d $c ]] && rmdir "$c" 2>/dev/null || true; done
	rmdir "$d" 2>/dev/null || true
done

# The DNS forwarder: only the dnsmasq that runs our configuration file.
dns_pid=""
if [[ -r $RC_DNSMASQ_PID ]]; then
	dns_pid=$(<"$RC_DNSMASQ_PID")
	dns_pid=${dns_pid//[^0-9]/}
	if [[ -z $dns_pid || $(cat "/proc/$dns_pid/comm" 2>/dev/null) != dnsmasq ]] ||
		! tr '\0' '\n' <"/proc/$dns_pid/cmdline" 2>/dev/null | grep -qxF -- "--conf-file=$RC_DNSMASQ_CONF"; then
		dns_pid=""
	fi
fi
if [[ -n $dns_pid ]]; then
	log "stopping dnsmasq (pid $dns_pid)"
	kill -TERM "$dns_pid" 2>/dev/null || true
	# Gone once it is a zombie: its parent is PID 1, which may reap late.
	running() {
		local st
		st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
		[[ -n $st && ${st:0:1} != Z ]]
	}
	deadline=$((SECONDS + 10))
	while running "$dns_pid" && ((SECONDS < deadline)); do sleep 0.05; done
	if running "$dns_pid"; then
		kill -KILL "$dns_pid" 2>/dev/null || true
		while running "$dns_pid"; do sleep 0.05; done
	fi
	did+=("dnsmasq stopped")
else
	did+=("dnsmasq not running")
fi
rm -f "$RC_DNSMASQ_PID" "$RC_DNSMASQ_STAMP"

if ((purge)); then
	# runsc keeps a namespace bind mount (null-netns, shared by its gofers)
	# under the exec root after its last sandbox: unmount those.
	findmnt -rn -o TARGET,FSTYPE | awk -v r="$RC_EXEC_ROOT/" 'index($1, r) == 1 && $2 == "nsfs" {print $1}' |
		while read -r m; do umount "$m" || umount -l "$m" || true; done
	# dockerd bind-mounts its data root onto itself and can leave that
	# mount behind when it stops: unmount the data root's own bind only.
	findmnt -rn -o TARGET,SOURCE | awk -v r="$RC_DATA_ROOT" '$1 == r && index($2, "[" r "]") > 0 {print $1}' |
		while read -r m; do umount "$m" || umount -l "$m" || true; done
	if grep -q -e "^$RC_DATA_ROOT" -e "^$RC_EXEC_ROOT" <<<"$(findmnt -rn -o TARGET)"; then
		die "mounts remain under $RC_DATA_ROOT or $RC_EXEC_ROOT; not deleting (check findmnt)"
	fi
	rm -rf "$RC_DATA_ROOT" "$RC_EXEC_ROOT" "$RC_RUN" "$RC_DATA/build"
	# Delete every rule carrying our comment, in every chain we used, by
	# its number (last first): a rule printed by -S does not always read
	# back as the same rule (the conntrack match of egress control's
	# accept), and one left behind would keep its place above the rules
	# the next setup inserts.
	n=0
	for tool in iptables ip6tables; do
		command -v "$tool" >/dev/null || continue
		for chain in $("$tool" -w -S 2>/dev/null | grep -e "--comment \"\?$RC_FW_COMMENT\"\?" | awk '{print $2}' | sort -u); do
			for num in $("$tool" -w -n -L "$chain" --line-numbers 2>/dev/null | awk -v c="/* $RC_FW_COMMENT */" 'index($0, c) {print $1}' | sort -rn); do
				"$tool" -w -D "$chain" "$num" && n=$((n + 1))
			done
		done
	done
	# Egress control: every backend's nftables table (testbackend/egress);
	# with the engine gone no sandbox is left that they could restrict.
	if command -v nft >/dev/null; then
		while read -r t; do
			[[ -n $t ]] && nft delete table inet "$t" && n=$((n + 1))
		done < <(nft list tables 2>/dev/null | awk '$1 == "table" && $2 == "inet" && $3 ~ /^rarecloud_egress_/ {print $3}')
	fi
	ip link delete "$RC_NET_BRIDGE" 2>/dev/null || true
	rm -f "$RC_NETWORK_JSON" "$RC_DAEMON_JSON" "$RC_DNSMASQ_CONF" "$RC_DNSMASQ_CONF.tmp"
	rmdir "$RC_ETC" 2>/dev/null || true
	did+=("purged data, images and $n firewall rules")
fi

line=""
for d in "${did[@]}"; do line+="${line:+; }$d"; done
echo "teardown: $line"
