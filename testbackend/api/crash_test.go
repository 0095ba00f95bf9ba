package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/netwire"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/egress"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// startArmed starts the failpoint build on data with point armed ("" for
// none) and a warm pool of pool containers, and kills it when the test
// ends.
func startArmed(t *testing.T, data, tokens, addr string, point failpoint.Point, pool int) *process {
	t.Helper()
	var env []string
	if point != "" {
		env = []string{failpoint.Env + "=" + string(point)}
	}
	return startBinary(t, failpointsBuild.get(t), env, data, tokens, addr, "--pool-size", strconv.Itoa(pool))
}

// crashCase is one way to crash: a failpoint that kills the backend while
// request is in flight, or (point "") a SIGKILL right after request was
// answered.
type crashCase struct {
	name  string
	point failpoint.Point
	// running: the sandbox runs before request, which acts on it.
	running bool
	// warm: the sandbox has neither env nor rules, and the backend keeps
	// one warm container (only such a sandbox claims one); else it is
	// DENY_ALL with an env value.
	warm bool
	// request passes the point.
	request func(e crashEnv)
	// reported: at the kill, the API may have reported the sandbox
	// running (it did, or could have), so it must be the same container
	// afterwards or end terminated with a reason.
	reported bool
	// then checks what the case promises beyond the invariants.
	then func(t *testing.T, c *client, id string)
}

const (
	crashCmd       = "echo ran >> /home/user/count"
	crashTimeoutMs = int64(1234567)
	crashFile      = "/home/user/crash.txt"
	crashContent   = "written before the crash\n"
)

// crashEnv is what a request acts with: the client, the backend's data,
// the create body and its Idempotency-Key, the running sandbox ("" if none).
type crashEnv struct {
	t             *testing.T
	c             *client
	data, key, id string
	body          map[string]any
	killed        <-chan struct{}
}

func crashCases() []crashCase {
	create := func(e crashEnv) {
		e.c.Raw("POST", "/sandboxes", tokA, e.body, map[string]string{"Idempotency-Key": e.key})
	}
	patch := func(e crashEnv) {
		e.c.Raw("PATCH", "/sandboxes/"+e.id, tokA, map[string]any{"timeoutMs": crashTimeoutMs}, nil)
	}
	write := func(e crashEnv) {
		e.c.Raw("PUT", "/sandboxes/"+e.id+"/files", tokA, map[string]any{"path": crashFile, "content": crashContent}, nil)
	}
	del := func(e crashEnv) {
		e.c.Raw("DELETE", "/sandboxes/"+e.id, tokA, nil, nil)
	}
	// claim creates once a warm container runs, until a create claims
	// one (a warm container still starting is not claimed: the create
	// starts its own, and is deleted before the next try).
	claim := func(e crashEnv) {
		for try := 0; try < 20; try++ {
			for warmContainers(e.t, e.data) == 0 {
				time.Sleep(20 * time.Millisecond)
			}
			key := fmt.Sprintf("%s-%d", e.key, try)
			st, env := e.c.Raw("POST", "/sandboxes", tokA, e.body, map[string]string{"Idempotency-Key": key})
			select {
			case <-e.killed:
				return
			case <-time.After(time.Second):
			}
			if st == 201 {
				var sb apitest.Sandbox
				if json.Unmarshal(env.Data, &sb) == nil {
					e.c.Raw("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil)
				}
			}
		}
	}
	patchKept := func(t *testing.T, c *client, id string) {
		if sb := c.Get(tokA, id); sb.TimeoutMs != crashTimeoutMs {
			t.Fatalf("the PATCH written before the crash is lost: timeoutMs %d, want %d", sb.TimeoutMs, crashTimeoutMs)
		}
	}
	fileKept := func(t *testing.T, c *client, id string) {
		if out := c.command(id, "cat "+crashFile); out.Stdout != crashContent {
			t.Fatalf("the file written before the crash: %+v", out)
		}
	}
	// exec runs crashCmd with the sandbox's one Idempotency-Key.
	exec := func(e crashEnv) {
		e.c.Raw("POST", "/sandboxes/"+e.id+"/commands", tokA, map[string]any{"cmd": crashCmd}, map[string]string{"Idempotency-Key": "exec-" + e.id})
	}
	// ranOnce retries exec after the restart: it must answer as the first
	// run did (replayed) or say its outcome is unknown, never run again;
	// the file says how often it ran.
	ranOnce := func(replay bool, runs string) func(t *testing.T, c *client, id string) {
		return func(t *testing.T, c *client, id string) {
			r := c.Do("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": crashCmd}, map[string]string{"Idempotency-Key": "exec-" + id})
			switch {
			case replay && (r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true"):
				t.Fatalf("the retry of an answered command after the crash: %v (Idempotent-Replayed %q), want its answer replayed", r, r.Header.Get("Idempotent-Replayed"))
			case !replay && r.ErrCode() != "COMMAND_OUTCOME_UNKNOWN":
				t.Fatalf("the retry of a command the crash cut off: %v, want 502 COMMAND_OUTCOME_UNKNOWN", r)
			}
			if out := c.command(id, "cat /home/user/count 2>/dev/null | wc -l"); strings.TrimSpace(out.Stdout) != runs {
				t.Fatalf("the command ran %s times, want %s", strings.TrimSpace(out.Stdout), runs)
			}
		}
	}
	gone := func(t *testing.T, c *client, id string) {
		if r := c.Do("GET", "/sandboxes/"+id, tokA, nil, nil); r.Status != 404 {
			t.Fatalf("a deleted sandbox came back after the crash: %v", r)
		}
	}
	return []crashCase{
		{name: "store.synced", point: failpoint.StoreSynced, request: create},
		{name: "create.recorded", point: failpoint.CreateRecorded, request: create},
		{name: "claim.recorded", point: failpoint.ClaimRecorded, warm: true, request: claim, reported: true},
		{name: "egress.applied", point: failpoint.EgressApplied, request: create},
		{name: "start.container", point: failpoint.StartContainer, request: create},
		{name: "start.recorded", point: failpoint.StartRecorded, request: create, reported: true},
		{name: "start.answered", point: failpoint.StartAnswered, request: create, reported: true},
		{name: "patch.recorded", point: failpoint.PatchRecorded, running: true, request: patch, reported: true, then: patchKept},
		{name: "file.written", point: failpoint.FileWritten, running: true, request: write, reported: true, then: fileKept},
		{name: "exec.recorded", point: failpoint.ExecRecorded, running: true, request: exec, reported: true, then: ranOnce(false, "0")},
		{name: "exec.ran", point: failpoint.ExecRan, running: true, request: exec, reported: true, then: ranOnce(false, "1")},
		{name: "delete.recorded", point: failpoint.DeleteRecorded, running: true, request: del, then: gone},
		// Killed from outside right after the answer: what was answered holds.
		{name: "answered/create", request: create, then: func(t *testing.T, c *client, id string) {
			if id == "" {
				t.Fatal("the answered create left no record")
			}
		}},
		{name: "answered/running", running: true, request: func(crashEnv) {}, reported: true},
		{name: "answered/patch", running: true, request: patch, reported: true, then: patchKept},
		{name: "answered/exec", running: true, request: exec, reported: true, then: ranOnce(true, "1")},
		{name: "answered/delete", running: true, request: del, then: gone},
	}
}

// TestCrashAtEachFailpoint kills the backend (a process of its own, with
// SIGKILL) at each failpoint of create, warm claim, start, PATCH, file
// write, keyed command and delete, and right after each kind of answer;
// restarts it on the same data; and checks what the API acknowledged
// survived and nothing of the crash is left: a sandbox the API could have
// reported running is the same container or ends terminated with a
// reason, an acknowledged (or recorded) PATCH holds, a keyed command never
// runs twice (its retry replays the answer or says the outcome is
// unknown), a deleted sandbox stays gone, no container,
// address lease, network namespace or egress rule is left without its
// record, and no env value or half-written record is at rest. Every
// sandbox is DENY_ALL, so each has an address and rules to leave behind.
func TestCrashAtEachFailpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range crashCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			data := filepath.Join(root, "data")
			tokens := writeTokens(t, root)
			pool := 0
			if tc.warm {
				pool = 1
			}
			p := startArmed(t, data, tokens, "", tc.point, pool)
			c := newClient(t, p.URL())
			key := fmt.Sprintf("crash-%d", time.Now().UnixNano())
			secret := "crash-secret-" + key
			body := map[string]any{"template": "base", "egressMode": "DENY_ALL", "env": map[string]string{"CRASH_SECRET": secret}, "labels": map[string]string{"crash": key}}
			if tc.warm {
				delete(body, "egressMode") // a warm container is claimed only without env and rules
				delete(body, "env")
			}

			var id, before string
			if tc.running {
				id = c.Running(tokA, body).ID
				before = sandboxContainer(t, data, id)
			}
			answered := make(chan struct{})
			go func() {
				defer close(answered)
				tc.request(crashEnv{t: t, c: c, data: data, key: key, id: id, body: body, killed: p.Done()})
			}()
			if tc.point == "" {
				<-answered
				if id == "" {
					id = recordWithLabel(t, data, key)
				}
				p.kill()
			} else {
				waitKilled(t, p, answered, tc.point)
			}
			if id == "" {
				id = recordWithLabel(t, data, key) // "" when the create's record never landed
			}
			if tc.reported && before == "" && id != "" {
				before = sandboxContainer(t, data, id)
			}
			atKill := instanceContainerIDs(t, data)

			p2 := startArmed(t, data, tokens, p.addr, "", pool)
			c = newClient(t, p2.URL())
			if id != "" {
				t.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+id, tokA, nil, nil) })
				if st, _ := c.Raw("GET", "/sandboxes/"+id, tokA, nil, nil); st == 200 {
					sb := c.WaitStatus(tokA, id, apitest.WaitTimeout, "running", "terminated", "exited")
					if tc.reported {
						switch {
						case sb.Status == "terminated" && sb.TerminationReason != "":
							t.Logf("ended after the crash: %s (%s)", sb.TerminationReason, sb.TerminationMessage)
						case sb.Status != "running":
							t.Fatalf("a sandbox the API reported running is %s after the crash, reason %q", sb.Status, sb.TerminationReason)
						default:
							if now := sandboxContainer(t, data, id); now != before {
								t.Fatalf("a sandbox the API reported running was silently replaced: container %.12s before the crash, %.12s after", before, now)
							}
						}
					}
				}
			}
			if tc.then != nil {
				tc.then(t, c, id)
			}
			assertNothingLeft(t, data, secret, atKill, pool)
		})
	}
}

// waitKilled waits until the armed point kills the backend; a request
// answered without the backend dying means the point was never passed.
func waitKilled(t *testing.T, p *process, answered <-chan struct{}, point failpoint.Point) {
	t.Helper()
	select {
	case <-p.Done():
		return
	case <-time.After(apitest.WaitTimeout):
	case <-answered:
		select {
		case <-p.Done():
			return
		case <-time.After(30 * time.Second):
		}
	}
	t.Fatalf("the backend did not die at failpoint %s: the request never passed it", point)
}

// assertNothingLeft checks, once the backend has recovered (bounded, as
// deletes and reconciliation run in the background), that every container
// of the instance has a live record, that the instance's egress sets hold
// only live records' addresses, that no address lease or namespace is
// left for a container of atKill that is gone, and that the data directory
// holds no half-written record and no env value (secret).
func assertNothingLeft(t *testing.T, data, secret string, atKill []string, pool int) {
	t.Helper()
	eventually(t, time.Minute, func() error {
		live := map[string]string{} // sandbox id -> egress address
		claimed := map[string]bool{}
		for _, rec := range recordsIn(t, data) {
			if rec.Status == sandbox.StatusPending || rec.Status == sandbox.StatusRunning {
				live[rec.ID] = rec.EgressIP
				claimed[rec.ContainerID] = true
			}
		}
		isLive := func(id string) bool { _, ok := live[id]; return ok }
		cs := listInstance(t, data)
		warm := map[string]int{} // per template
		for _, c := range cs {
			switch {
			case claimed[c.ID]:
			case c.Labels[container.LabelPool] != "":
				if tpl := c.Labels[container.LabelPool]; warm[tpl]+1 > pool {
					return fmt.Errorf("warm container %s is one more than the %s pool holds (%d)", c.Name, tpl, pool)
				}
				warm[c.Labels[container.LabelPool]]++
			case !isLive(c.Labels[container.LabelSandboxID]):
				return fmt.Errorf("container %s is left without a live record", c.Name)
			}
		}
		sets := egressAddresses(t, data)
		for _, ip := range sets {
			if !slices.Contains(slices.Collect(maps.Values(live)), ip) {
				return fmt.Errorf("egress rules for %s are left without a live record (live: %v)", ip, live)
			}
		}
		// Positive controls of the probes: what lives is seen.
		for id, ip := range live {
			if ip != "" && !slices.Contains(sets, ip) {
				return fmt.Errorf("sandbox %s's address %s is not in its instance's egress sets %v", id, ip, sets)
			}
		}
		for _, c := range cs {
			if c.Running && leaseOf(c.ID) == "" {
				return fmt.Errorf("the running container %s has no address lease", c.Name)
			}
		}
		for _, cid := range atKill {
			if slices.ContainsFunc(cs, func(c container.Container) bool { return c.ID == cid }) {
				continue
			}
			if _, err := os.Lstat(filepath.Join(ocispec.NetnsDir, cid)); err == nil {
				return fmt.Errorf("the network namespace of removed container %.12s is left", cid)
			}
			if lease := leaseOf(cid); lease != "" {
				return fmt.Errorf("the address lease %s of removed container %.12s is left", lease, cid)
			}
		}
		for _, rec := range recordsIn(t, data) {
			if rec.Status == sandbox.StatusPending {
				return fmt.Errorf("sandbox %s is still pending", rec.ID) // holds its env until it starts
			}
		}
		return filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			if err != nil || d.IsDir() {
				return err
			}
			if strings.HasPrefix(d.Name(), ".tmp-") {
				return fmt.Errorf("a half-written record is left: %s", path)
			}
			b, err := os.ReadFile(path)
			if err == nil && bytes.Contains(b, []byte(secret)) {
				return fmt.Errorf("an env value is at rest in %s", path)
			}
			return nil
		})
	})
}

// recordWithLabel is the id of a sandbox record under data labelled
// crash=key, or "".
func recordWithLabel(t *testing.T, data, key string) string {
	t.Helper()
	for _, rec := range recordsIn(t, data) {
		if rec.Labels["crash"] == key {
			return rec.ID
		}
	}
	return ""
}

// warmContainers counts the instance's running warm containers.
func warmContainers(t *testing.T, data string) int {
	n := 0
	for _, c := range listInstance(t, data) {
		if c.Running && c.Labels[container.LabelPool] != "" && c.Labels[container.LabelSandboxID] == "" {
			n++
		}
	}
	return n
}

// recordsIn reads every sandbox record under data.
func recordsIn(t *testing.T, data string) []*store.Sandbox {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(data, "records", "sandboxes"))
	var out []*store.Sandbox
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			if rec := readRecord(t, data, id); rec != nil {
				out = append(out, rec)
			}
		}
	}
	return out
}

// listInstance lists the containers of the backend instance of data.
func listInstance(t *testing.T, data string) []container.Container {
	t.Helper()
	rt, err := docker.New(docker.Options{Instance: instance.ID(data)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// instanceContainerIDs is the ids of the instance's containers now.
func instanceContainerIDs(t *testing.T, data string) []string {
	t.Helper()
	var ids []string
	for _, c := range listInstance(t, data) {
		ids = append(ids, c.ID)
	}
	return ids
}

// sandboxContainer is the id of the sandbox's container ("" for none):
// the one its record names (a claimed warm container has no sandbox
// label), else the one labelled with its id.
func sandboxContainer(t *testing.T, data, id string) string {
	t.Helper()
	cs := listInstance(t, data)
	if rec := readRecord(t, data, id); rec != nil && rec.ContainerID != "" {
		if slices.ContainsFunc(cs, func(c container.Container) bool { return c.ID == rec.ContainerID }) {
			return rec.ContainerID
		}
	}
	for _, c := range cs {
		if c.Labels[container.LabelSandboxID] == id {
			return c.ID
		}
	}
	return ""
}

var ipv4 = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)

// egressAddresses is the addresses in the instance's deny and listed sets
// (none when it has no table).
func egressAddresses(t *testing.T, data string) []string {
	t.Helper()
	var out []string
	for _, set := range []string{"deny", "listed"} {
		b, err := exec.Command("nft", "list", "set", "inet", egress.TablePrefix+instance.ID(data), set).Output()
		if err != nil {
			continue
		}
		_, elems, _ := strings.Cut(string(b), "elements")
		out = append(out, ipv4.FindAllString(elems, -1)...)
	}
	return out
}

// leaseOf is the address lease pointing at container cid ("" for none).
func leaseOf(cid string) string {
	entries, _ := os.ReadDir(netwire.LeaseDir)
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(netwire.LeaseDir, e.Name())); err == nil && filepath.Base(target) == cid {
			return e.Name()
		}
	}
	return ""
}
