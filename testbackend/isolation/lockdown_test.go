package isolation

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// TestLockdown: uid 10001, no capabilities, no new privileges, a read-only
// root file system, and writable areas that stop at their size. A full
// disk in one sandbox leaves another sandbox and the backend unaffected.
func TestLockdown(t *testing.T) {
	t.Parallel()
	c := backend(t)
	boxes := c.RunningAll(tokA, map[string]any{"template": "base"}, map[string]any{"template": "base"})
	a, b := boxes[0].ID, boxes[1].ID

	t.Run("identity and privileges", func(t *testing.T) {
		out := ok(t, "id", c.command(a, `id -u; id -g; id -G; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status`, 10000))
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 3 || lines[0] != "10001" || lines[1] != "10001" || lines[2] != "10001" {
			t.Fatalf("uid/gid/groups: %q", out)
		}
		for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
			"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("missing %q in /proc/self/status:\n%s", want, out)
			}
		}
		// A set-uid root program (su) is in the image; while it waits for a
		// password its real, effective, saved and file uids all stay 10001
		// and it holds no capability.
		out = ok(t, "setuid", c.command(a, `stat -c %A /usr/bin/su; (sleep 2 | su root -c true 2>/dev/null; echo "su-exit:$?") & sleep 0.5; p=$(pgrep -x su) && grep -E '^(Uid|Gid|CapEff):' /proc/$p/status; wait`, 20000))
		if !strings.HasPrefix(out, "-rwsr-xr-x") {
			t.Fatalf("expected a set-uid su in the image: %q", out)
		}
		for _, want := range []string{"Uid:\t10001\t10001\t10001\t10001\n", "Gid:\t10001\t10001\t10001\t10001\n", "CapEff:\t0000000000000000\n", "su-exit:1\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("set-uid su: missing %q in:\n%s", want, out)
			}
		}
	})

	t.Run("read-only root", func(t *testing.T) {
		out := ok(t, "mounts", c.command(a, `awk '$2=="/" {print $4}' /proc/mounts`, 10000))
		if !strings.HasPrefix(out, "ro,") && strings.TrimSpace(out) != "ro" {
			t.Fatalf("root mount options %q, want ro", out)
		}
		// Directories the user may not write anyway fail with a permission
		// error or a read-only one; world-writable ones on the root file
		// system (/var/tmp, /run/lock) show that the file system itself is
		// read only.
		for _, p := range []string{"/probe", "/etc/probe", "/usr/probe", "/usr/bin/probe", "/var/tmp/probe", "/run/lock/probe"} {
			r := c.command(a, fmt.Sprintf(`echo x > %s`, p), 10000)
			failed(t, "write "+p, r)
			if !strings.Contains(r.Stderr, "Read-only file system") && !strings.Contains(r.Stderr, "Permission denied") {
				t.Errorf("write %s: %v", p, r)
			}
			if (strings.HasPrefix(p, "/var/tmp") || strings.HasPrefix(p, "/run/lock")) && !strings.Contains(r.Stderr, "Read-only file system") {
				t.Errorf("write to world-writable %s: want Read-only file system, got %v", p, r)
			}
		}
		r := c.command(a, `touch /etc/passwd; mkdir /usr/lib/x; rm -f /bin/sh; ls -l /bin/sh >/dev/null && echo still-there`, 10000)
		if !strings.Contains(r.Stdout, "still-there") || strings.Count(r.Stderr, "Read-only file system")+strings.Count(r.Stderr, "Permission denied") < 3 {
			t.Errorf("changes to system files: %v", r)
		}
		// Through the API: the file route runs as the sandbox user too.
		for _, p := range []string{"/etc/probe", "/usr/local/bin/probe", "/var/tmp/probe"} {
			apitest.ExpectErr(t, c.writeFile(a, p, "x"), http.StatusForbidden, "PERMISSION_DENIED")
		}
	})

	t.Run("disk limits", func(t *testing.T) {
		kb := smallDisk / 1024
		out := ok(t, "df", c.command(a, `df -k /home/user /tmp | awk 'NR>1 {print $2}'`, 10000))
		if f := strings.Fields(out); len(f) != 2 || f[0] != fmt.Sprint(kb) || f[1] != fmt.Sprint(kb) {
			t.Fatalf("sizes of /home/user and /tmp: %q, want %d KiB each", out, kb)
		}
		for _, dir := range []string{"/home/user", "/tmp"} {
			r := c.command(a, fmt.Sprintf(`dd if=/dev/zero of=%s/fill bs=1M count=64 2>&1 && echo wrote-all; stat -c %%s %s/fill`, dir, dir), 60000)
			if strings.Contains(r.Stdout, "wrote-all") || !strings.Contains(r.Stdout, "No space left") {
				t.Fatalf("filling %s: %v", dir, r)
			}
			var size int64
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			if _, err := fmt.Sscan(lines[len(lines)-1], &size); err != nil || size > smallDisk || size < smallDisk/2 {
				t.Fatalf("size of %s/fill: %q", dir, lines[len(lines)-1])
			}
		}
		// Full: the file route says so; the sandbox still answers.
		apitest.ExpectErr(t, c.writeFile(a, "/home/user/more.txt", strings.Repeat("y", 100000)), http.StatusInsufficientStorage, "STORAGE_FULL")
		apitest.ExpectErr(t, c.writeFile(a, "/tmp/more.txt", strings.Repeat("y", 100000)), http.StatusInsufficientStorage, "STORAGE_FULL")
		if out := ok(t, "full sandbox", c.command(a, "echo alive", 10000)); out != "alive\n" {
			t.Fatalf("full sandbox: %q", out)
		}

		// The other sandbox has its own, empty areas and writes on.
		out = ok(t, "other df", c.command(b, `df -k /home/user /tmp | awk 'NR>1 {print $3}'`, 10000))
		if f := strings.Fields(out); len(f) != 2 || f[0] != "0" || f[1] != "0" {
			t.Fatalf("other sandbox's used space: %q, want 0 and 0", out)
		}
		out = ok(t, "other writes", c.command(b, `dd if=/dev/zero of=/home/user/f bs=1M count=6 2>/dev/null && dd if=/dev/zero of=/tmp/f bs=1M count=6 2>/dev/null && stat -c %s /home/user/f /tmp/f`, 60000))
		if out != "6291456\n6291456\n" {
			t.Fatalf("other sandbox wrote %q", out)
		}
		content := strings.Repeat("héllo ", 1000)
		if r := c.writeFile(b, "/home/user/dir/note.txt", content); r.Status != http.StatusOK {
			t.Fatalf("other sandbox: file write %v", r)
		}
		got := apitest.DecodeData[struct{ Content string }](t, c.Do("GET", "/sandboxes/"+b+"/files?path=/home/user/dir/note.txt", tokA, nil, nil))
		if got.Content != content {
			t.Fatalf("other sandbox: read back %d bytes, wrote %d", len(got.Content), len(content))
		}
		// And the backend answers on.
		list := apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes", tokA, nil, nil))
		found := 0
		for _, sb := range list {
			if (sb.ID == a || sb.ID == b) && sb.Status == "running" {
				found++
			}
		}
		if found != 2 {
			t.Fatalf("list after the full disk: %+v", list)
		}
		// Freeing space makes the full sandbox writable again.
		out = ok(t, "free", c.command(a, `rm /home/user/fill && echo ok > /home/user/again && cat /home/user/again`, 10000))
		if out != "ok\n" {
			t.Fatalf("after freeing: %q", out)
		}
	})
}
