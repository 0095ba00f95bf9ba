package docker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/registrytest"
)

// blobGate is a proxy on 127.0.0.1 in front of a test registry. It holds
// every blob GET until its repository is let through, counts the
// requests of each repository, and records the most repositories that had
// a blob GET in progress at once: the pulls downloading at once, as the
// registry sees them.
type blobGate struct {
	Host string // 127.0.0.1:PORT; image references name it

	mu       sync.Mutex
	cond     *sync.Cond
	open     map[string]bool // repositories let through
	all      bool            // every repository let through
	inflight map[string]int  // blob GETs in progress, by repository
	arrived  []string        // repositories held now, in order of arrival
	reqs     map[string]int  // requests, by repository
	maxRepos int
}

func startBlobGate(t *testing.T, reg *registrytest.Registry) *blobGate {
	t.Helper()
	g := &blobGate{open: map[string]bool{}, inflight: map[string]int{}, reqs: map[string]int{}}
	g.cond = sync.NewCond(&g.mu)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		repo, blob := repoOf(req.URL.Path)
		g.mu.Lock()
		if repo != "" {
			g.reqs[repo]++
		}
		if !blob || req.Method != http.MethodGet {
			g.mu.Unlock()
			proxy.ServeHTTP(w, req)
			return
		}
		g.inflight[repo]++
		g.maxRepos = max(g.maxRepos, len(g.inflight))
		if !g.all && !g.open[repo] && !slices.Contains(g.arrived, repo) {
			g.arrived = append(g.arrived, repo)
		}
		for !g.all && !g.open[repo] {
			g.cond.Wait()
		}
		g.mu.Unlock()
		proxy.ServeHTTP(w, req)
		g.mu.Lock()
		if g.inflight[repo]--; g.inflight[repo] == 0 {
			delete(g.inflight, repo)
		}
		g.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(g.letAll) // first: a held request would keep Close waiting
	g.Host = strings.TrimPrefix(srv.URL, "http://")
	return g
}

// repoOf is the repository a registry path names, and whether it is a blob's.
func repoOf(path string) (repo string, blob bool) {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return "", false
	}
	if repo, _, ok := strings.Cut(rest, "/blobs/"); ok {
		return repo, true
	}
	repo, _, _ = strings.Cut(rest, "/manifests/")
	return repo, false
}

// held is the repositories whose blob GETs the gate holds now.
func (g *blobGate) held() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.arrived)
}

func (g *blobGate) let(repo string) {
	g.mu.Lock()
	g.open[repo] = true
	g.arrived = slices.DeleteFunc(g.arrived, func(r string) bool { return r == repo })
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *blobGate) letAll() {
	g.mu.Lock()
	g.all = true
	g.arrived = nil
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *blobGate) requests(repo string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reqs[repo]
}

func (g *blobGate) mostAtOnce() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxRepos
}

// pushVia pushes a random image as repo:1 to reg and returns its
// reference through the gate.
func pushVia(t *testing.T, reg *registrytest.Registry, g *blobGate, repo string, size int64) string {
	t.Helper()
	reg.Push(t, repo+":1", registrytest.RandomImage(t, size, 1))
	return g.Host + "/" + repo + ":1"
}

// waitUntil polls cond until it holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
	}
}

// ensureAsync runs EnsureImage in the background; its answer comes on
// the channel.
func ensureAsync(ctx context.Context, d *Runtime, ref string) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- d.EnsureImage(ctx, ref) }()
	return ch
}

func answer(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Minute):
		t.Fatalf("%s: no answer in 5 minutes", what)
		return nil
	}
}

func (d *Runtime) activePulls() int {
	d.imgMu.Lock()
	defer d.imgMu.Unlock()
	return d.gate.active
}

// More distinct pulls at once than MaxPulls: the registry never sees
// more than MaxPulls of them downloading at once, and all succeed. The
// gate holds each pull's blobs until the test lets one through; each
// round waits until every pull the runtime runs is held there, so a pull
// past the bound would be seen.
func TestPullsBoundedAtOnce(t *testing.T) {
	const n, bound = 5, 2
	reg := registrytest.Start(t, registrytest.Options{})
	g := startBlobGate(t, reg)
	refs := map[string]string{} // by repository
	for i := range n {
		repo := fmt.Sprintf("team/many%d", i)
		refs[repo] = pushVia(t, reg, g, repo, 64<<10)
	}
	d := pullRuntime(t, reg, Options{AllowRegistries: []string{g.Host}, MaxPulls: bound})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	answers := map[string]<-chan error{}
	for repo, ref := range refs {
		answers[repo] = ensureAsync(ctx, d, ref)
	}
	for range n {
		var held []string
		waitUntil(t, "every pull under way reaches the registry's blobs", func() bool {
			held = g.held()
			return len(held) > 0 && len(held) == d.activePulls()
		})
		if len(held) > bound {
			t.Fatalf("%d pulls downloading at once (%v), want at most %d", len(held), held, bound)
		}
		g.let(held[0])
		if err := answer(t, answers[held[0]], "ensure "+refs[held[0]]); err != nil {
			t.Fatalf("ensure %s: %v", refs[held[0]], err)
		}
	}
	for repo, ref := range refs {
		if !present(t, d, ref) {
			t.Errorf("%s (%s) is not on the engine", ref, repo)
		}
	}
	if got := g.mostAtOnce(); got != bound {
		t.Fatalf("the registry saw at most %d pulls downloading at once, want exactly %d (the bound, reached)", got, bound)
	}
}

// A create that gives up while its pull waits for a slot stops waiting at
// once, and its pull leaves the line: it never downloads, and the next
// pull in line takes the slot. The control: the image is pulled when
// asked again.
func TestPullWaiterThatGivesUpLeavesTheLine(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	g := startBlobGate(t, reg)
	a := pushVia(t, reg, g, "team/first", 64<<10)
	b := pushVia(t, reg, g, "team/gaveup", 64<<10)
	c := pushVia(t, reg, g, "team/next", 64<<10)
	d := pullRuntime(t, reg, Options{AllowRegistries: []string{g.Host}, MaxPulls: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	first := ensureAsync(ctx, d, a)
	waitUntil(t, "the first pull downloads", func() bool { return slices.Contains(g.held(), "team/first") })
	bctx, giveUp := context.WithCancel(ctx)
	gaveUp := ensureAsync(bctx, d, b)
	waitUntil(t, "the second pull waits in line", func() bool {
		d.imgMu.Lock()
		defer d.imgMu.Unlock()
		return len(d.gate.line) == 1 && d.gate.line[0].ref == b && d.gate.line[0].waiters == 1
	})
	giveUp()
	err := answer(t, gaveUp, "the ensure that gave up")
	if refusedRule(err) != container.RulePull || !strings.Contains(err.Error(), b) || !strings.Contains(err.Error(), "busy with other pulls") {
		t.Fatalf("ensure that gave up in line: %v, want a %s refusal naming the image and the busy backend", err, container.RulePull)
	}
	d.imgMu.Lock()
	left, inLine := d.flights[b] == nil, len(d.gate.line)
	d.imgMu.Unlock()
	if !left || inLine != 0 {
		t.Fatalf("the pull nobody waits for is still there (flight gone %v, %d in line)", left, inLine)
	}

	next := ensureAsync(ctx, d, c)
	waitUntil(t, "the next pull waits in line", func() bool {
		d.imgMu.Lock()
		defer d.imgMu.Unlock()
		return len(d.gate.line) == 1
	})
	g.letAll()
	for ref, ch := range map[string]<-chan error{a: first, c: next} {
		if err := answer(t, ch, "ensure "+ref); err != nil {
			t.Fatalf("ensure %s: %v", ref, err)
		}
	}
	// With one slot, the pull in line after the abandoned one has run to
	// its end: had the abandoned one stayed in line, it would have run
	// before.
	if n := g.requests("team/gaveup"); n != 0 || present(t, d, b) {
		t.Fatalf("the abandoned pull reached the registry (%d requests) or the engine (%v)", n, present(t, d, b))
	}
	if g.requests("team/next") == 0 || !present(t, d, c) {
		t.Fatalf("the pull after it did not run")
	}
	if err := d.EnsureImage(ctx, b); err != nil || !present(t, d, b) {
		t.Fatalf("ensure of the abandoned image, asked again: %v", err)
	}
}

// Images pulled in the last minutes that no container uses yet may not
// push the store past its budget by more than one largest image: a pull
// is refused at once, nothing downloaded, while those held images do not
// fit in the budget, and allowed again once a container uses one.
func TestPullRefusedWhileHeldImagesFillBudget(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	g := startBlobGate(t, reg)
	g.letAll()
	a := pushVia(t, reg, g, "team/held-a", 1<<20)
	b := pushVia(t, reg, g, "team/held-b", 1<<20)
	c := pushVia(t, reg, g, "team/held-c", 1<<20)
	// 1.5 MiB: A alone fits, A and B (held) do not.
	d := pullRuntime(t, reg, Options{AllowRegistries: []string{g.Host}, ImageBudgetBytes: 3 << 19, MaxImageBytes: 8 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ref := range []string{a, b} {
		if err := d.EnsureImage(ctx, ref); err != nil {
			t.Fatalf("ensure %s: %v", ref, err)
		}
	}
	err := d.EnsureImage(ctx, c)
	var later *container.PullLaterError
	if !errors.As(err, &later) || later.PerAccount || !strings.Contains(err.Error(), c) || !strings.Contains(err.Error(), "image store is full") {
		t.Fatalf("ensure with the held images over the budget: %v, want the store-full refusal naming the image", err)
	}
	if later.RetryAfter <= 0 || later.RetryAfter > imageHold+time.Second || !strings.Contains(err.Error(), fmt.Sprintf("in %d s", int(later.RetryAfter/time.Second))) {
		t.Fatalf("the refusal's retry is %v (%q), want within the hold of %v and said in the message", later.RetryAfter, err, imageHold)
	}
	if n := g.requests("team/held-c"); n != 0 || present(t, d, c) {
		t.Fatalf("the refused pull reached the registry (%d requests) or the engine", n)
	}
	// A container uses A now (Start ends the hold when it creates one):
	// B alone is held, which fits.
	d.startedFrom(a)
	if err := d.EnsureImage(ctx, c); err != nil || !present(t, d, c) {
		t.Fatalf("ensure once a hold ended: %v", err)
	}
}

// An account pulls one image at a time: a second reference while its
// first pull is under way is refused at once, nothing downloaded. Not
// refused: the same reference (it joins the pull), an image already
// present, another account's pull; and the second reference once the
// first pull ended.
func TestPullOneAtATimePerAccount(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	g := startBlobGate(t, reg)
	pre := pushVia(t, reg, g, "team/pre", 64<<10)
	a1 := pushVia(t, reg, g, "team/a1", 64<<10)
	a2 := pushVia(t, reg, g, "team/a2", 64<<10)
	b1 := pushVia(t, reg, g, "team/b1", 64<<10)
	d := pullRuntime(t, reg, Options{AllowRegistries: []string{g.Host}, MaxPulls: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	acctA := container.WithPullAccount(ctx, "acct-a")
	acctB := container.WithPullAccount(ctx, "acct-b")

	g.let("team/pre")
	if err := d.EnsureImage(acctA, pre); err != nil {
		t.Fatalf("ensure %s: %v", pre, err)
	}
	first := ensureAsync(acctA, d, a1)
	waitUntil(t, "the account's first pull downloads", func() bool { return slices.Contains(g.held(), "team/a1") })

	err := d.EnsureImage(acctA, a2)
	var later *container.PullLaterError
	if !errors.As(err, &later) || !later.PerAccount || later.RetryAfter <= 0 || !strings.Contains(err.Error(), a2) {
		t.Fatalf("the account's second image while its first pulls: %v, want the per-account refusal naming the image", err)
	}
	if n := g.requests("team/a2"); n != 0 {
		t.Fatalf("the refused pull reached the registry (%d requests)", n)
	}

	if err := d.EnsureImage(acctA, pre); err != nil {
		t.Fatalf("an image already present, meanwhile: %v", err)
	}
	joined := ensureAsync(acctA, d, a1)
	waitUntil(t, "the same image joins the pull", func() bool {
		d.imgMu.Lock()
		defer d.imgMu.Unlock()
		return d.flights[a1] != nil && d.flights[a1].waiters == 2
	})
	other := ensureAsync(acctB, d, b1)
	waitUntil(t, "another account's pull downloads", func() bool { return slices.Contains(g.held(), "team/b1") })

	g.letAll()
	for ref, ch := range map[string]<-chan error{a1: first, a1 + " (joined)": joined, b1: other} {
		if err := answer(t, ch, "ensure "+ref); err != nil {
			t.Fatalf("ensure %s: %v", ref, err)
		}
	}
	if err := d.EnsureImage(acctA, a2); err != nil || !present(t, d, a2) {
		t.Fatalf("the second image once the first pull ended: %v", err)
	}
}

// One account does not fill the image store for the others: once the
// images its pulls brought and no sandbox started from take half the
// budget, its next pull is refused at once (429: its own doing, with
// Retry-After until its first hold ends), nothing downloaded, while
// another account's pull goes on; the account pulls again once a
// container uses one of its images.
func TestPullRefusedPastTheAccountsHalfOfTheStore(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	g := startBlobGate(t, reg)
	g.letAll()
	a1 := pushVia(t, reg, g, "team/half-a1", 1<<20)
	a2 := pushVia(t, reg, g, "team/half-a2", 1<<20)
	a3 := pushVia(t, reg, g, "team/half-a3", 1<<20)
	b1 := pushVia(t, reg, g, "team/half-b1", 1<<20)
	// 3.5 MiB: the store holds A's two images and B's; its half (1.75 MiB) is less than A's two.
	d := pullRuntime(t, reg, Options{AllowRegistries: []string{g.Host}, ImageBudgetBytes: 7 << 19, MaxImageBytes: 8 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	acctA := container.WithPullAccount(ctx, "acct-a")
	acctB := container.WithPullAccount(ctx, "acct-b")
	for _, ref := range []string{a1, a2} {
		if err := d.EnsureImage(acctA, ref); err != nil {
			t.Fatalf("ensure %s: %v", ref, err)
		}
	}
	err := d.EnsureImage(acctA, a3)
	var later *container.PullLaterError
	if !errors.As(err, &later) || !later.PerAccount || later.RetryAfter <= 0 || later.RetryAfter > imageHold+time.Second || !strings.Contains(err.Error(), a3) || !strings.Contains(err.Error(), "half of the backend's image store") {
		t.Fatalf("the account's pull past its half of the store: %v, want the per-account refusal naming the image", err)
	}
	if n := g.requests("team/half-a3"); n != 0 || present(t, d, a3) {
		t.Fatalf("the refused pull reached the registry (%d requests) or the engine", n)
	}
	// Another account's pull is not refused for it (the control: the
	// store as a whole has room).
	if err := d.EnsureImage(acctB, b1); err != nil || !present(t, d, b1) {
		t.Fatalf("another account's pull beside it: %v", err)
	}
	// A container uses one of A's images now: A pulls again.
	d.startedFrom(a1)
	if err := d.EnsureImage(acctA, a3); err != nil || !present(t, d, a3) {
		t.Fatalf("the account's pull once one of its holds ended: %v", err)
	}
}
