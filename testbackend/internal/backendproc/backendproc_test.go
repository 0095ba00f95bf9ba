package backendproc

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// serveEnv makes the test binary play the backend: it listens on the
// address after --listen, or exits 1 when it cannot.
const serveEnv = "BACKENDPROC_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		standIn()
	}
	os.Exit(m.Run())
}

func standIn() {
	for i, a := range os.Args {
		if a == "--listen" && i+1 < len(os.Args) {
			ln, err := net.Listen("tcp", os.Args[i+1])
			if err != nil {
				os.Exit(1)
			}
			for {
				c, err := ln.Accept()
				if err != nil {
					os.Exit(1)
				}
				c.Close()
			}
		}
	}
	os.Exit(2)
}

// occupied is a listener of the test's own, accepting, on a loopback port.
func occupied(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

func standInOptions(addr string) Options {
	return Options{Binary: os.Args[0], Addr: addr, Env: []string{serveEnv + "=1"}, ListenTimeout: 30 * time.Second}
}

// TestStartPicksAnotherPortWhenTaken: a port Start picked that another
// listener took before the backend bound it is not taken for the
// backend's (a connection to it succeeds all the same); Start picks
// another port and the backend listens there. Red without the check of
// whose socket listens: Start then returns the other listener's address.
func TestStartPicksAnotherPortWhenTaken(t *testing.T) {
	taken := occupied(t)
	picks := 0
	freeAddr = func() (string, error) {
		picks++
		if picks == 1 {
			return taken, nil
		}
		return FreeAddr()
	}
	t.Cleanup(func() { freeAddr = FreeAddr })
	p, err := Start(standInOptions(""))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Addr == taken || picks != 2 || !ownsListener(p.Pid(), p.Addr) {
		t.Fatalf("started on %s after %d picks (the taken port was %s)", p.Addr, picks, taken)
	}
}

// TestStartRefusesATakenAddress: on an address it was given that another
// listener holds, Start reports the backend's exit instead of success.
func TestStartRefusesATakenAddress(t *testing.T) {
	taken := occupied(t)
	p, err := Start(standInOptions(taken))
	if err == nil {
		p.Kill()
		t.Fatalf("started on %s, which another listener holds", taken)
	}
	if !strings.Contains(err.Error(), "exited before it listened") {
		t.Fatalf("error: %v", err)
	}
}

// TestOwnsListener: the test process owns its own listener (the positive
// control) and not a port where nothing listens, nor one another process
// listens on.
func TestOwnsListener(t *testing.T) {
	mine := occupied(t)
	if !ownsListener(os.Getpid(), mine) {
		t.Fatalf("the test's own listener on %s not found as its own", mine)
	}
	free, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if ownsListener(os.Getpid(), free) {
		t.Fatalf("%s, where nothing listens, found as the test's", free)
	}
	p, err := Start(standInOptions(""))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if ownsListener(os.Getpid(), p.Addr) || !ownsListener(p.Pid(), p.Addr) {
		t.Fatalf("the stand-in's listener on %s: owned by the test %v, by the stand-in %v", p.Addr, ownsListener(os.Getpid(), p.Addr), ownsListener(p.Pid(), p.Addr))
	}
}
