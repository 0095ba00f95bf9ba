package isolation

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
)

// secretScanScript walks the whole file system (not /proc, /sys, /dev
// except /dev/shm)
// and the other processes' environments and command lines, looking for
// any of the needles in file contents and for sockets and anything named
// like the engine's socket. The needles arrive inside the code (stdin).
const secretScanScript = `import itertools, json, os, stat
needles = [n.encode() for n in json.loads(%q)]
hits, sockets, names, scanned = [], [], [], [0, 0]
for d, dirs, files in itertools.chain(os.walk("/", onerror=lambda e: None), os.walk("/dev/shm", onerror=lambda e: None)):
    if d == "/":
        dirs[:] = [x for x in dirs if x not in ("proc", "sys", "dev")]
    for n in dirs + files:
        if "docker" in n.lower() or "containerd" in n.lower() or n == "rarecloud":
            names.append(os.path.join(d, n))
    for n in files:
        p = os.path.join(d, n)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode):
            sockets.append(p)
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        try:
            with open(p, "rb") as f:
                data = f.read(4 << 20)
        except OSError:
            continue
        scanned[0] += 1
        scanned[1] += len(data)
        for i, nd in enumerate(needles):
            if nd in data:
                hits.append("%%d:%%s" %% (i, p))
me = str(os.getpid())
for pid in os.listdir("/proc"):
    if not pid.isdigit() or pid == me:
        continue
    for what in ("environ", "cmdline"):
        try:
            with open("/proc/%%s/%%s" %% (pid, what), "rb") as f:
                data = f.read()
        except OSError:
            continue
        for i, nd in enumerate(needles):
            if nd in data:
                hits.append("%%d:/proc/%%s/%%s" %% (i, pid, what))
print(json.dumps({"hits": hits, "sockets": sockets, "names": names, "files": scanned[0], "bytes": scanned[1]}))
`

type secretScan struct {
	Hits    []string `json:"hits"`
	Sockets []string `json:"sockets"`
	Names   []string `json:"names"`
	Files   int      `json:"files"`
	Bytes   int64    `json:"bytes"`
}

// TestNoCredentialsInside: nothing of the backend's tokens, the test
// process's environment, the backend's data directory or the engine's
// socket is visible inside a sandbox: not in its environment, its mounts,
// its files or its processes.
func TestNoCredentialsInside(t *testing.T) {
	t.Parallel()
	c := backend(t)
	sb := c.Running(tokA, map[string]any{"template": "python", "env": map[string]string{"MY_SETTING": "visible-" + canary[len(canary)-4:]}}).ID
	engineSock := strings.TrimPrefix(engineHost(), "unix://")
	needles := []string{tokA, tokB, canary, sharedDir, engineSock, "/run/rarecloud", "/var/lib/rarecloud"}

	t.Run("environment", func(t *testing.T) {
		// pid 1 (the agent) is not dumpable, so its environ is closed to
		// sandbox code; what it holds is checked on the engine's side.
		out := ok(t, "env", c.command(sb, "env; echo ---; tr '\\0' '\\n' < /proc/1/environ 2>&1; echo ---", 10000))
		if !strings.Contains(out, "MY_SETTING=visible-"+canary[len(canary)-4:]) {
			t.Fatalf("the sandbox's own env var is missing (control):\n%s", out)
		}
		out += strings.Join(mainProcessEnv(t, sb), "\n")
		for _, n := range append(needles, canaryEnv, "DOCKER", "RARECLOUD_TOKEN", "rc_pat_") {
			if strings.Contains(out, n) {
				t.Errorf("environment holds %q:\n%s", n, out)
			}
		}
	})

	t.Run("mounts", func(t *testing.T) {
		out := ok(t, "mounts", c.command(sb, "cat /proc/mounts", 10000))
		allowed := []string{"/", "/dev", "/dev/pts", "/dev/shm", "/proc", "/sys", "/tmp", "/home/user",
			"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/.rarecloud-agent", ocispec.ChannelTarget}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 {
				t.Fatalf("mount line %q", line)
			}
			if !slices.Contains(allowed, f[1]) && !strings.HasPrefix(f[1], "/sys/fs/cgroup") {
				t.Errorf("unexpected mount %q", line)
			}
			if f[1] == "/.rarecloud-agent" && !strings.HasPrefix(f[3], "ro") {
				t.Errorf("the agent binary is mounted writable: %q", line)
			}
			if f[1] == ocispec.ChannelTarget && !strings.HasPrefix(f[3], "ro") {
				t.Errorf("the agent's channel directory is mounted writable: %q", line)
			}
		}
		for _, n := range append(needles, "docker.sock", "containerd") {
			if strings.Contains(out, n) {
				t.Errorf("mounts mention %q:\n%s", n, out)
			}
		}
	})

	t.Run("runtime directories", func(t *testing.T) {
		out := ok(t, "ls", c.command(sb, "ls -la /run/ /var/run/ /run/lock/", 10000))
		for _, n := range []string{"docker", "containerd", ".sock", "rarecloud", "secrets"} {
			if strings.Contains(out, n) {
				t.Errorf("runtime directories hold %q:\n%s", n, out)
			}
		}
	})

	t.Run("files and processes", func(t *testing.T) {
		// Control: a token planted in the sandbox is found where it is.
		planted := "/home/user/.config/planted.txt"
		if r := c.writeFile(sb, planted, "token="+tokB+"\n"); r.Status != http.StatusOK {
			t.Fatalf("plant: %v", r)
		}
		list, err := json.Marshal(needles)
		if err != nil {
			t.Fatal(err)
		}
		out := ok(t, "scan", c.python(sb, fmt.Sprintf(secretScanScript, string(list)), 120000))
		var s secretScan
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("scan output %q: %v", out, err)
		}
		t.Logf("scanned %d files, %d MB", s.Files, s.Bytes>>20)
		if s.Files < 1000 {
			t.Errorf("the scan read only %d files: it did not cover the file system", s.Files)
		}
		if len(s.Hits) != 1 || s.Hits[0] != "1:"+planted {
			t.Errorf("secrets found %v, want only the planted control 1:%s (needles: 0 tokA, 1 tokB, 2 canary, 3 data dir, 4.. engine paths)", s.Hits, planted)
		}
		if len(s.Sockets) != 0 {
			t.Errorf("socket files in the sandbox: %v", s.Sockets)
		}
		// Docker's own marker file says nothing and grants nothing.
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return n == "/.dockerenv" })
		if len(s.Names) != 0 {
			t.Errorf("engine-related names in the sandbox: %v", s.Names)
		}
	})
}

// mainProcessEnv is the environment the engine gives a sandbox's main
// process (the agent).
func mainProcessEnv(t *testing.T, id string) []string {
	t.Helper()
	cid := containerIDs(t)[id]
	if cid == "" {
		t.Fatalf("no container for %s", id)
	}
	cli, err := client.NewClientWithOpts(client.WithHost(engineHost()), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := cli.ContainerInspect(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config == nil || !slices.ContainsFunc(info.Config.Env, func(e string) bool { return strings.HasPrefix(e, "MY_SETTING=") }) {
		t.Fatalf("the engine shows no MY_SETTING for %s (control): %+v", id, info.Config)
	}
	return info.Config.Env
}
