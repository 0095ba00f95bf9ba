package isolation

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers for the network tests: what a sandbox sees of its own address,
// a listener inside a sandbox, connection probes from inside, and a
// listener on the host.

// sandboxNet is the subnet of the network `make setup` creates
// (/etc/rarecloud/network.json).
var sandboxNet = &net.IPNet{IP: net.IPv4(172, 30, 99, 0), Mask: net.CIDRMask(24, 32)}

const gateway = "172.30.99.1"

// sandboxIP is the sandbox's address as it sees it (Docker writes it into
// /etc/hosts under the hostname; no resolver is involved).
func sandboxIP(t *testing.T, c *apiClient, id string) string {
	t.Helper()
	out := strings.TrimSpace(ok(t, "own address", c.python(id, "import socket; print(socket.gethostbyname(socket.gethostname()))", 20000)))
	ip := net.ParseIP(out)
	if ip == nil || !sandboxNet.Contains(ip) || out == gateway {
		t.Fatalf("sandbox %s: address %q is not in %v", id, out, sandboxNet)
	}
	return out
}

// listenScript accepts connections on 0.0.0.0:PORT, logs each peer to
// /tmp/accepts.log and greets with TAG. Its command line carries TAG.
const listenScript = `import socket, sys
port, tag = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(16)
open("/tmp/listening", "w").write("yes")
while True:
    c, a = s.accept()
    with open("/tmp/accepts.log", "a") as f:
        f.write(a[0] + "\n")
    try:
        c.sendall(("hello " + tag + "\n").encode())
    finally:
        c.close()
`

// startListener runs listenScript in the background in a sandbox.
func startListener(t *testing.T, c *apiClient, id string, port int, tag string) {
	t.Helper()
	if r := c.writeFile(id, "/tmp/listen.py", listenScript); r.Status != http.StatusOK {
		t.Fatalf("write listener: %v", r)
	}
	cmd := fmt.Sprintf(`nohup python3 /tmp/listen.py %d %s >/tmp/listen.out 2>&1 &
for i in $(seq 100); do [ -e /tmp/listening ] && exit 0; sleep 0.1; done; cat /tmp/listen.out; exit 1`, port, tag)
	ok(t, "start listener", c.command(id, cmd, 20000))
}

// acceptedPeers reads the listener's log of accepted peers.
func acceptedPeers(t *testing.T, c *apiClient, id string) []string {
	t.Helper()
	out := ok(t, "accepts", c.command(id, "cat /tmp/accepts.log 2>/dev/null; true", 10000))
	return strings.Fields(out)
}

type probeResult struct {
	Addr      string `json:"addr"`
	Connected bool   `json:"connected"`
	Data      string `json:"data"`
	Err       string `json:"err"`
	Ms        int64  `json:"ms"`
}

// probeScript connects to every target at once, each with a timeout, and
// prints what happened as JSON. Targets arrive inside the code (stdin), not
// on a command line.
const probeScript = `import json, socket, threading, time
targets, timeout = json.loads(%q), %v
out = [None] * len(targets)
def probe(i, addr):
    host, port = addr.rsplit(":", 1)
    r = {"addr": addr, "connected": False, "data": "", "err": ""}
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((host, int(port)))
        r["connected"] = True
        try:
            r["data"] = s.recv(200).decode(errors="replace")
        except Exception as e:
            r["err"] = "recv: %%s: %%s" %% (type(e).__name__, e)
    except Exception as e:
        r["err"] = "%%s: %%s" %% (type(e).__name__, e)
    finally:
        s.close()
    r["ms"] = int((time.monotonic() - t0) * 1000)
    out[i] = r
ts = [threading.Thread(target=probe, args=(i, a)) for i, a in enumerate(targets)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps(out))
`

// connectTimeout bounds every connection attempt of the network tests.
const connectTimeout = 3 * time.Second

// probe connects from inside a sandbox to each target ("ip:port"), each
// within connectTimeout.
func probe(t *testing.T, c *apiClient, id string, targets ...string) map[string]probeResult {
	t.Helper()
	list, err := json.Marshal(targets)
	if err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(probeScript, string(list), connectTimeout.Seconds())
	out := ok(t, "probe", c.python(id, code, int(connectTimeout.Milliseconds())+20000))
	var res []probeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != len(targets) {
		t.Fatalf("probe output %q: %v", out, err)
	}
	m := map[string]probeResult{}
	for _, r := range res {
		m[r.Addr] = r
	}
	return m
}

// wantBlocked asserts that no probe connected and, when refused is set,
// that each got the answer of a REJECT rule (a TCP reset or an ICMP
// unreachable: refused, no route, unreachable), not a timeout.
func wantBlocked(t *testing.T, res map[string]probeResult, refused bool) {
	t.Helper()
	for addr, r := range res {
		if r.Connected {
			t.Errorf("sandbox connected to %s: %+v", addr, r)
			continue
		}
		if r.Err == "" {
			t.Errorf("probe of %s: no error recorded: %+v", addr, r)
		}
		// A REJECT answers at once; a DROP or a dead end would leave the
		// connect to its timeout: the answer is the rule's mark.
		if e := strings.ToLower(r.Err); refused && !strings.Contains(e, "refused") && !strings.Contains(e, "unreachable") && !strings.Contains(e, "no route") {
			t.Errorf("blocked connect to %s: %s after %d ms, want the answer of a REJECT rule", addr, r.Err, r.Ms)
		}
		t.Logf("%-22s blocked after %4d ms: %s", addr, r.Ms, r.Err)
	}
}

// hostListener listens on every host address and records who connected.
type hostListener struct {
	port  int
	mu    sync.Mutex
	peers []string
}

func newHostListener(t *testing.T) *hostListener {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	h := &hostListener{port: ln.Addr().(*net.TCPAddr).Port} //nolint:forcetypeassert // a tcp4 listener
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.peers = append(h.peers, conn.RemoteAddr().String())
			h.mu.Unlock()
			_, _ = conn.Write([]byte("host\n"))
			conn.Close()
		}
	}()
	return h
}

func (h *hostListener) accepted() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.peers...)
}

// hostIPv4s lists the host's own IPv4 addresses on the sandbox bridge, a
// Docker network of the project's own. The uplink's address is left out on
// purpose: tests send traffic only to loopback and to hosts and networks
// the project made, even where the address is this machine's.
func hostIPv4s(t *testing.T) []string {
	t.Helper()
	ifc, err := net.InterfaceByName("rcsbx0")
	if err != nil {
		t.Fatalf("interface rcsbx0: %v (run `make setup`)", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

// dialFromHost connects from the host and returns the greeting.
func dialFromHost(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp4", addr, connectTimeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(connectTimeout))
	buf := make([]byte, 200)
	n, err := conn.Read(buf)
	if n > 0 {
		return string(buf[:n]), nil
	}
	return "", err
}
