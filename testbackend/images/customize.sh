#!/bin/sh
# mmdebstrap --customize-hook for every template: adds the sandbox user,
# its home, and removes what should not ship. $1 is the image root.
set -eu
root=$1

# User and group 10001 ("user"), written directly: the essential variant has
# no useradd.
grep -q '^user:' "$root/etc/group" || echo 'user:x:10001:' >>"$root/etc/group"
grep -q '^user:' "$root/etc/passwd" ||
	echo 'user:x:10001:10001:sandbox user:/home/user:/bin/bash' >>"$root/etc/passwd"
if [ -f "$root/etc/shadow" ] && ! grep -q '^user:' "$root/etc/shadow"; then
	echo 'user:!:19000:0:99999:7:::' >>"$root/etc/shadow"
fi
if [ -f "$root/etc/gshadow" ] && ! grep -q '^user:' "$root/etc/gshadow"; then
	echo 'user:!::' >>"$root/etc/gshadow"
fi
mkdir -p "$root/home/user"
chown 10001:10001 "$root/home/user"
chmod 0755 "$root/home/user"
chmod 1777 "$root/tmp"

# No apt configuration from the build host in the image, no logs, no caches.
rm -f "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/* 2>/dev/null || true
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/apt \
	"$root"/var/log/dpkg.log "$root"/var/log/alternatives.log "$root"/var/cache/debconf/*-old

# What the runtime relies on in every template.
for tool in timeout sh cat mkdir tar id; do
	if ! chroot "$root" /bin/sh -c "command -v $tool" >/dev/null; then
		echo "customize: $tool missing from image" >&2
		exit 1
	fi
done
