package isolation

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/egress"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// Egress control on real gVisor sandboxes against the test's own fake
// internet (egressnet_test.go). Every "refused" has a positive control: an
// ALLOW_ALL sandbox, or the same sandbox through an allowed name, reaches
// the very host.

func wantReached(t *testing.T, what string, r probeResult, greeting string) {
	t.Helper()
	if !r.Connected || r.Data != greeting {
		t.Fatalf("%s: want the greeting %q, got %+v", what, greeting, r)
	}
	t.Logf("%s: reached after %d ms", what, r.Ms)
}

// wantRefused: not connected, and refused at once, not after a timeout.
func wantRefused(t *testing.T, what string, r probeResult) {
	t.Helper()
	if r.Connected {
		t.Fatalf("%s: connected: %+v", what, r)
	}
	if r.Err == "" || strings.Contains(r.Err, "timed out") || r.Ms >= connectTimeout.Milliseconds() {
		t.Fatalf("%s: want a fast refusal, got %+v", what, r)
	}
	t.Logf("%s: refused after %d ms: %s", what, r.Ms, r.Err)
}

func wantNoAddress(t *testing.T, what string, r resolved) {
	t.Helper()
	if len(r.Addrs) != 0 || r.Err == "" {
		t.Fatalf("%s: want no address, got %+v", what, r)
	}
}

// TestEgressAllowList: under ALLOW_LIST an allowed name resolves and its
// address is reached; a name not on the list does not resolve (and is
// never asked upstream) and its address is refused at once, though an
// ALLOW_ALL sandbox reaches it; an allowed name that resolves into a
// private range gives no address and the private host stays refused; a
// wildcard covers the names below it (not itself), and reaching its
// address opens only what its answer named.
func TestEgressAllowList(t *testing.T) {
	t.Parallel()
	f := newEgressNet(t)
	b := egressBackend(t, t.TempDir(), f)
	t.Cleanup(func() { apitest.DeleteAll(b.URL(), time.Minute, tokA); b.Close() })
	c := newClient(t, b.URL())

	boxes := c.RunningAll(tokA,
		map[string]any{"template": "python", "egressMode": "ALLOW_LIST", "egressAllowlist": []string{nameA, nameRebind, wildEntry}},
		map[string]any{"template": "python"},
	)
	list, open := boxes[0].ID, boxes[1].ID

	// Control: the ALLOW_ALL sandbox reaches every public host by address.
	ctl := probe(t, c, open, f.addr(f.pubA), f.addr(f.pubB))
	wantReached(t, "ALLOW_ALL to host A", ctl[f.addr(f.pubA)], f.greeting(f.pubA))
	wantReached(t, "ALLOW_ALL to host B", ctl[f.addr(f.pubB)], f.greeting(f.pubB))

	// Before any lookup, nothing is reachable, not even an allowed host.
	before := probe(t, c, list, f.addr(f.pubA), f.addr(f.pubB), f.addr(f.priv))
	wantRefused(t, "ALLOW_LIST to host A before resolving its name", before[f.addr(f.pubA)])
	wantRefused(t, "ALLOW_LIST to host B", before[f.addr(f.pubB)])
	wantRefused(t, "ALLOW_LIST to the private host", before[f.addr(f.priv)])

	res := resolve(t, c, list, nameA, nameB, nameRebind, wildApex)
	if got := res[nameA].Addrs; len(got) != 1 || got[0] != f.pubA {
		t.Fatalf("allowed name %s resolves to %v (%s), want %s", nameA, got, res[nameA].Err, f.pubA)
	}
	wantNoAddress(t, "name not on the list "+nameB, res[nameB])
	wantNoAddress(t, "allowed name resolving to a private address "+nameRebind, res[nameRebind])
	wantNoAddress(t, "the wildcard's own apex "+wildApex, res[wildApex])
	if f.askedFor(nameB) || f.askedFor(wildApex) {
		t.Fatalf("the forwarder asked upstream for a name on no list")
	}
	if !f.askedFor(nameRebind) {
		t.Fatalf("the rebinding name was never asked upstream: the test proves nothing about the filter")
	}

	after := probe(t, c, list, f.addr(f.pubA), f.addr(f.pubB), f.addr(f.priv))
	wantReached(t, "ALLOW_LIST to host A after resolving "+nameA, after[f.addr(f.pubA)], f.greeting(f.pubA))
	wantRefused(t, "ALLOW_LIST to host B (no allowed name resolved to it)", after[f.addr(f.pubB)])
	wantRefused(t, "ALLOW_LIST to the private host an allowed name pointed at", after[f.addr(f.priv)])

	// The wildcard: a name below it resolves, and its address opens.
	w := resolve(t, c, list, nameWild)
	if got := w[nameWild].Addrs; len(got) != 1 || got[0] != f.pubB {
		t.Fatalf("%s under %s resolves to %v (%s), want %s", nameWild, wildEntry, got, w[nameWild].Err, f.pubB)
	}
	wantReached(t, "ALLOW_LIST to host B after resolving "+nameWild, probe(t, c, list, f.addr(f.pubB))[f.addr(f.pubB)], f.greeting(f.pubB))

	// The kernel holds exactly what the answers allowed, for this sandbox.
	ip := sandboxIP(t, c, list)
	table := nftTable(t, b.Egress().Table())
	for _, want := range []string{ip + " . " + f.pubA, ip + " . " + f.pubB} {
		if !strings.Contains(table, want) {
			t.Fatalf("set allowed lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, " . "+f.priv) {
		t.Fatalf("the private address entered set allowed:\n%s", table)
	}

	// Deleting the sandbox removes its rules: it was the last restricted
	// sandbox of this backend, so the whole table goes.
	if r := c.Do("DELETE", "/sandboxes/"+list, tokA, nil, nil); r.Status >= 300 {
		t.Fatalf("delete: %v", r)
	}
	// The delete answers first; the container, then its rules, go after.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Manager().AwaitRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	if tb := nftTable(t, b.Egress().Table()); tb != "" {
		t.Fatalf("the table outlived the last restricted sandbox:\n%s", tb)
	}
}

// TestEgressDenyAll: a DENY_ALL sandbox reaches nothing (the public hosts
// an ALLOW_ALL sandbox reaches, by address) and resolves nothing, and a
// run-mode DENY_ALL program is refused from its very first connect.
func TestEgressDenyAll(t *testing.T) {
	t.Parallel()
	f := newEgressNet(t)
	b := egressBackend(t, t.TempDir(), f)
	t.Cleanup(func() { apitest.DeleteAll(b.URL(), time.Minute, tokA); b.Close() })
	c := newClient(t, b.URL())

	boxes := c.RunningAll(tokA,
		map[string]any{"template": "python", "egressMode": "DENY_ALL"},
		map[string]any{"template": "python", "egressMode": "ALLOW_ALL"},
	)
	deny, open := boxes[0].ID, boxes[1].ID
	targets := []string{f.addr(f.pubA), f.addr(f.pubB), gateway + ":53"}

	ctl := probe(t, c, open, targets...)
	wantReached(t, "ALLOW_ALL to host A", ctl[f.addr(f.pubA)], f.greeting(f.pubA))
	wantReached(t, "ALLOW_ALL to host B", ctl[f.addr(f.pubB)], f.greeting(f.pubB))
	if r := ctl[gateway+":53"]; !r.Connected {
		t.Fatalf("control: ALLOW_ALL to the DNS forwarder (tcp 53): %+v", r)
	}

	got := probe(t, c, deny, targets...)
	wantRefused(t, "DENY_ALL to host A", got[f.addr(f.pubA)])
	wantRefused(t, "DENY_ALL to host B", got[f.addr(f.pubB)])
	wantRefused(t, "DENY_ALL to the DNS forwarder (tcp 53)", got[gateway+":53"])
	res := resolve(t, c, deny, nameA)
	wantNoAddress(t, "DENY_ALL resolving "+nameA, res[nameA])
	if res[nameA].Ms >= 2*connectTimeout.Milliseconds() {
		t.Fatalf("DENY_ALL name resolution failed only after %d ms; it should be refused at once", res[nameA].Ms)
	}
	if f.askedFor(nameA) {
		t.Fatalf("a DENY_ALL sandbox's lookup reached the upstream resolver")
	}

	// Run mode: the program starts with the container; the rules are in
	// place before that (the address is fixed and its rules installed
	// before the container exists).
	connect := fmt.Sprintf(`import socket
for a in [%q, %q]:
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((a, %d)); print(a, "CONNECTED", s.recv(100).decode().strip())
    except Exception as e:
        print(a, "REFUSED", type(e).__name__)
`, f.pubA, f.pubB, f.port())
	runLogs := func(mode string) string {
		sb := c.Create(tokA, map[string]any{"template": "python", "egressMode": mode, "entrypoint": []string{"python3", "-c", connect}})
		done := c.WaitStatus(tokA, sb.ID, 2*time.Minute, "exited", "terminated")
		if done.Status != "exited" {
			t.Fatalf("run-mode %s sandbox: %+v", mode, done)
		}
		r := c.Do("GET", "/sandboxes/"+sb.ID+"/logs", tokA, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("logs: %v", r)
		}
		logs := apitest.DecodeData[map[string]string](t, r)["logs"]
		t.Logf("run-mode %s program: %q", mode, logs)
		return logs
	}
	if logs := runLogs("ALLOW_ALL"); !strings.Contains(logs, f.pubA+" CONNECTED "+f.token) || !strings.Contains(logs, f.pubB+" CONNECTED "+f.token) {
		t.Fatalf("control: a run-mode ALLOW_ALL program did not reach both hosts: %q", logs)
	}
	if logs := runLogs("DENY_ALL"); strings.Contains(logs, "CONNECTED") || strings.Count(logs, "REFUSED") != 2 {
		t.Fatalf("a run-mode DENY_ALL program was not refused at its first connects: %q", logs)
	}
}

// TestEgressNeighbours: two ALLOW_LIST sandboxes with different lists do
// not share rules: what one resolved stays closed to the other, and each
// resolves only its own names.
func TestEgressNeighbours(t *testing.T) {
	t.Parallel()
	f := newEgressNet(t)
	b := egressBackend(t, t.TempDir(), f)
	t.Cleanup(func() { apitest.DeleteAll(b.URL(), time.Minute, tokA); b.Close() })
	c := newClient(t, b.URL())

	boxes := c.RunningAll(tokA,
		map[string]any{"template": "python", "egressMode": "ALLOW_LIST", "egressAllowlist": []string{nameA}},
		map[string]any{"template": "python", "egressMode": "ALLOW_LIST", "egressAllowlist": []string{wildEntry}},
	)
	one, two := boxes[0].ID, boxes[1].ID

	r1 := resolve(t, c, one, nameA, nameWild)
	if len(r1[nameA].Addrs) != 1 {
		t.Fatalf("sandbox one does not resolve its own name: %+v", r1[nameA])
	}
	wantNoAddress(t, "sandbox one resolving the other's name", r1[nameWild])
	r2 := resolve(t, c, two, nameWild, nameA)
	if len(r2[nameWild].Addrs) != 1 {
		t.Fatalf("sandbox two does not resolve its own name: %+v", r2[nameWild])
	}
	wantNoAddress(t, "sandbox two resolving the other's name", r2[nameA])

	p1 := probe(t, c, one, f.addr(f.pubA), f.addr(f.pubB))
	wantReached(t, "sandbox one to its host A", p1[f.addr(f.pubA)], f.greeting(f.pubA))
	wantRefused(t, "sandbox one to host B, which only sandbox two resolved", p1[f.addr(f.pubB)])
	p2 := probe(t, c, two, f.addr(f.pubA), f.addr(f.pubB))
	wantReached(t, "sandbox two to its host B", p2[f.addr(f.pubB)], f.greeting(f.pubB))
	wantRefused(t, "sandbox two to host A, which only sandbox one resolved", p2[f.addr(f.pubA)])
}

// TestEgressRestart: the rules hold while the backend is down and after
// it restarts, and a backend that finds its table gone (a reboot, a flush)
// rebuilds it from the records before it serves; the new forwarder
// answers the ALLOW_LIST sandbox.
func TestEgressRestart(t *testing.T) {
	t.Parallel()
	f := newEgressNet(t)
	dir := t.TempDir()
	b := egressBackend(t, dir, f)
	// Whatever happens, the sandboxes and their rules go: through the
	// running backend, or one started for it when the test stopped with
	// none running.
	running := b
	t.Cleanup(func() {
		if running == nil {
			var err error
			if running, err = startBackend(filepath.Join(dir, "data"), testbackend.Config{EgressDNSUpstream: f.dnsAddr}); err != nil {
				t.Errorf("cleanup: %v", err)
				return
			}
		}
		apitest.DeleteAll(running.URL(), time.Minute, tokA)
		_ = running.Close()
	})
	c := newClient(t, b.URL())
	var deny, list, open string
	for _, sb := range c.RunningAll(tokA,
		map[string]any{"template": "python", "egressMode": "DENY_ALL"},
		map[string]any{"template": "python", "egressMode": "ALLOW_LIST", "egressAllowlist": []string{nameA}},
		map[string]any{"template": "python"},
	) {
		switch {
		case deny == "":
			deny = sb.ID
		case list == "":
			list = sb.ID
		default:
			open = sb.ID
		}
	}
	denyIP, listIP := sandboxIP(t, c, deny), sandboxIP(t, c, list)
	table := b.Egress().Table()
	running = nil
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Down: the kernel still holds both sandboxes' rules.
	tb := nftTable(t, table)
	if !strings.Contains(tb, denyIP) || !strings.Contains(tb, listIP) {
		t.Fatalf("with the backend down the table lacks %s or %s:\n%s", denyIP, listIP, tb)
	}

	check := func(b *testbackend.Backend, when string) {
		t.Helper()
		c := newClient(t, b.URL())
		ctl := probe(t, c, open, f.addr(f.pubA))
		wantReached(t, when+": ALLOW_ALL to host A", ctl[f.addr(f.pubA)], f.greeting(f.pubA))
		wantRefused(t, when+": DENY_ALL to host A", probe(t, c, deny, f.addr(f.pubA))[f.addr(f.pubA)])
		wantRefused(t, when+": ALLOW_LIST to host B", probe(t, c, list, f.addr(f.pubB))[f.addr(f.pubB)])
		r := resolve(t, c, list, nameA, nameB)
		if len(r[nameA].Addrs) != 1 {
			t.Fatalf("%s: the ALLOW_LIST sandbox does not resolve its name: %+v", when, r[nameA])
		}
		wantNoAddress(t, when+": ALLOW_LIST resolving "+nameB, r[nameB])
		wantReached(t, when+": ALLOW_LIST to host A", probe(t, c, list, f.addr(f.pubA))[f.addr(f.pubA)], f.greeting(f.pubA))
	}

	b = egressBackend(t, dir, f)
	running = b
	check(b, "after a restart")
	running = nil
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Lost rules: the next start rebuilds them from the records.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := egress.DeleteTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	b = egressBackend(t, dir, f)
	running = b
	check(b, "after a restart that found no rules")
	tb = nftTable(t, table)
	if !strings.Contains(tb, denyIP) || !strings.Contains(tb, listIP) {
		t.Fatalf("the rebuilt table lacks %s or %s:\n%s", denyIP, listIP, tb)
	}
}
