#!/usr/bin/env bash
# make teardown: stops the dockerd that scripts/setup.sh started (by its
# pidfile) and waits until it is gone. Its containers stop with it.
#
#   scripts/teardown.sh          stop dockerd, keep images, data and rules
#   scripts/teardown.sh --purge  also delete its data root (images, networks,
#                                containers), run state, the firewall rules
#                                tagged rarecloud-sandbox and /etc/rarecloud.
#                                The runsc binary stays (slow to rebuild).
set -euo pipefail

RC_PROG=teardown
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

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
	while [[ -d /proc/$pid ]] && ((SECONDS < deadline)); do sleep 0.2; done
	if [[ -d /proc/$pid ]]; then
		log "dockerd still running after 90s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		while [[ -d /proc/$pid ]]; do sleep 0.1; done
	fi
	did+=("dockerd stopped")
else
	did+=("dockerd not running")
fi
rm -f "$RC_CONFIG_STAMP"

if ((purge)); then
	# runsc keeps a namespace bind mount (null-netns, shared by its gofers)
	# under the exec root after its last sandbox: unmount those.
	findmnt -rn -o TARGET,FSTYPE | awk -v r="$RC_EXEC_ROOT/" 'index($1, r) == 1 && $2 == "nsfs" {print $1}' |
		while read -r m; do umount "$m" || umount -l "$m" || true; done
	if findmnt -rn -o TARGET | grep -q -e "^$RC_DATA_ROOT" -e "^$RC_EXEC_ROOT"; then
		die "mounts remain under $RC_DATA_ROOT or $RC_EXEC_ROOT; not deleting (check findmnt)"
	fi
	rm -rf "$RC_DATA_ROOT" "$RC_EXEC_ROOT" "$RC_RUN" "$RC_DATA/build"
	# Delete every rule carrying our comment, in every chain we used.
	n=0
	for tool in iptables ip6tables; do
		command -v "$tool" >/dev/null || continue
		while read -r rule; do
			[[ -n $rule ]] || continue
			# "-A CHAIN spec..." -> "-D CHAIN spec..."
			eval "$tool -w -D ${rule#-A }" && n=$((n + 1))
		done < <("$tool" -w -S 2>/dev/null | grep -e "--comment \"\?$RC_FW_COMMENT\"\?" || true)
	done
	ip link delete "$RC_NET_BRIDGE" 2>/dev/null || true
	rm -f "$RC_NETWORK_JSON" "$RC_DAEMON_JSON"
	rmdir "$RC_ETC" 2>/dev/null || true
	did+=("purged data, images and $n firewall rules")
fi

line=""
for d in "${did[@]}"; do line+="${line:+; }$d"; done
echo "teardown: $line"
