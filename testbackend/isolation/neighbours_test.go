package isolation

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// scanScript looks, from inside a sandbox, for a marker in file names and
// contents under the writable and runtime directories and in every other
// process's command line and environment. The marker arrives inside the
// code (stdin), so no command line carries it.
const scanScript = `import json, os
marker = %q.encode()
hits = []
budget = [64 << 20]
for root in ["/home", "/tmp", "/var/tmp", "/run", "/dev/shm", "/etc", "/opt", "/srv", "/mnt", "/media", "/root"]:
    for d, dirs, files in os.walk(root, onerror=lambda e: None):
        for n in dirs + files:
            if marker in n.encode():
                hits.append("name:" + os.path.join(d, n))
        for n in files:
            p = os.path.join(d, n)
            try:
                if not os.path.isfile(p) or os.path.islink(p) or budget[0] <= 0:
                    continue
                with open(p, "rb") as f:
                    data = f.read(1 << 20)
                budget[0] -= len(data)
                if marker in data:
                    hits.append("file:" + p)
            except OSError:
                pass
me = str(os.getpid())
procs = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit() or pid == me:
        continue
    procs += 1
    for what in ("cmdline", "environ"):
        try:
            with open("/proc/%%s/%%s" %% (pid, what), "rb") as f:
                if marker in f.read():
                    hits.append("proc:%%s/%%s" %% (pid, what))
        except OSError:
            pass
print(json.dumps({"hits": sorted(hits), "procs": procs}))
`

type scanResult struct {
	Hits  []string `json:"hits"`
	Procs int      `json:"procs"`
}

func scan(t *testing.T, c *apiClient, id, marker string) scanResult {
	t.Helper()
	out := ok(t, "scan", c.python(id, fmt.Sprintf(scanScript, marker), 60000))
	var r scanResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("scan output %q: %v", out, err)
	}
	return r
}

// TestNeighbours: two sandboxes of one account on the sandbox network see
// nothing of each other (files, processes) and cannot connect to each
// other; neither can reach any port of the host, and the host cannot
// connect into a sandbox.
func TestNeighbours(t *testing.T) {
	t.Parallel()
	c := backend(t)
	boxes := c.RunningAll(tokA, map[string]any{"template": "python"}, map[string]any{"template": "python"})
	a, b := boxes[0].ID, boxes[1].ID
	marker := "neighbour-marker-" + randomHex(8)
	const port = 8765

	// A: a file in each writable area and a process whose command line
	// carries the marker (the listener).
	if r := c.writeFile(a, "/home/user/"+marker+".txt", marker); r.Status != 200 {
		t.Fatalf("write: %v", r)
	}
	ok(t, "tmp marker", c.command(a, "echo "+marker+" > /tmp/secret && echo "+marker+" > /dev/shm/secret", 10000))
	startListener(t, c, a, port, marker)
	ipA, ipB := sandboxIP(t, c, a), sandboxIP(t, c, b)
	if ipA == ipB {
		t.Fatalf("both sandboxes have address %s", ipA)
	}
	t.Logf("A %s at %s, B %s at %s", a, ipA, b, ipB)

	t.Run("files and processes", func(t *testing.T) {
		// The scan finds the marker where it is: in A.
		inA := scan(t, c, a, marker)
		for _, want := range []string{"name:/home/user/" + marker + ".txt", "file:/home/user/" + marker + ".txt", "file:/tmp/secret", "file:/dev/shm/secret"} {
			if !slices.Contains(inA.Hits, want) {
				t.Errorf("scan in A misses %s: %v", want, inA.Hits)
			}
		}
		if !slices.ContainsFunc(inA.Hits, func(h string) bool { return strings.HasPrefix(h, "proc:") && strings.HasSuffix(h, "/cmdline") }) {
			t.Errorf("scan in A misses the listener process: %v", inA.Hits)
		}
		// And nowhere in B.
		inB := scan(t, c, b, marker)
		if len(inB.Hits) != 0 {
			t.Errorf("B sees A's marker: %v", inB.Hits)
		}
		out := ok(t, "ps in B", c.command(b, "ps -eo pid,user,args", 10000))
		if strings.Contains(out, marker) || strings.Contains(out, "listen.py") {
			t.Errorf("B's process list shows A's processes:\n%s", out)
		}
		outA := ok(t, "ps in A", c.command(a, "ps -eo pid,user,args", 10000))
		if !strings.Contains(outA, "listen.py") {
			t.Errorf("A's process list lacks its own listener:\n%s", outA)
		}
		t.Logf("processes seen: A %d, B %d (besides the scanner)", inA.Procs, inB.Procs)
		if inB.Procs >= inA.Procs {
			t.Errorf("B sees %d processes, A (which runs a listener more) %d", inB.Procs, inA.Procs)
		}
		// The file route of B answers for B's file system only.
		r := c.Do("GET", "/sandboxes/"+b+"/files?path="+url.QueryEscape("/home/user/"+marker+".txt"), tokA, nil, nil)
		apitest.ExpectErr(t, r, 404, "FILE_NOT_FOUND")
	})

	t.Run("sandbox to sandbox", func(t *testing.T) {
		// The listener answers inside A, on A's own address ...
		self := probe(t, c, a, fmt.Sprintf("%s:%d", ipA, port))
		if r := self[fmt.Sprintf("%s:%d", ipA, port)]; !r.Connected || !strings.Contains(r.Data, "hello "+marker) {
			t.Fatalf("A cannot reach its own listener: %+v", r)
		}
		// ... and B cannot reach it.
		wantBlocked(t, probe(t, c, b, fmt.Sprintf("%s:%d", ipA, port)), false)
		if peers := acceptedPeers(t, c, a); len(peers) != 1 || peers[0] != ipA {
			t.Fatalf("A's listener accepted %v, want only its own probe from %s", peers, ipA)
		}
	})

	t.Run("host to sandbox", func(t *testing.T) {
		addr := net.JoinHostPort(ipA, fmt.Sprint(port))
		t0 := time.Now()
		greeting, err := dialFromHost(addr)
		if err == nil {
			t.Fatalf("the host connected to %s and got %q", addr, greeting)
		}
		t.Logf("host to %s: %v after %v", addr, err, time.Since(t0).Round(time.Millisecond))
		if peers := acceptedPeers(t, c, a); len(peers) != 1 {
			t.Fatalf("A's listener accepted %v, want only its own probe", peers)
		}
	})

	t.Run("sandbox to host", func(t *testing.T) {
		h := newHostListener(t)
		// The backend listens on loopback only, so no address of the bridge
		// could answer for it whatever the firewall does: probing its port
		// there would prove nothing. What is probed instead is h, a listener
		// on every host address, which only the firewall keeps out (the
		// runtime's TestSandboxCannotReachHost shows a sandbox on a network
		// without the rule reaching such a listener).
		if !strings.HasPrefix(shared.URL(), "http://127.0.0.1:") {
			t.Fatalf("the backend listens on %s, not on loopback only", shared.URL())
		}
		// Control: the listener answers the host itself on the gateway and
		// on every host address.
		hostAddrs := hostIPv4s(t)
		if !slices.Contains(hostAddrs, gateway) {
			t.Fatalf("gateway %s is not a host address: %v", gateway, hostAddrs)
		}
		var targets []string
		for _, ip := range hostAddrs {
			addr := net.JoinHostPort(ip, fmt.Sprint(h.port))
			if g, err := dialFromHost(addr); err != nil || g != "host\n" {
				t.Fatalf("control: host to its own listener at %s: %q %v", addr, g, err)
			}
			targets = append(targets, addr)
		}
		controls := len(h.accepted())
		// The sandbox's loopback is its own: the port is closed there.
		targets = append(targets, fmt.Sprintf("127.0.0.1:%d", h.port))
		wantBlocked(t, probe(t, c, b, targets...), true)
		if got := h.accepted(); len(got) != controls {
			t.Fatalf("host listener accepted %v; only the %d host controls were expected", got, controls)
		}
	})
}
