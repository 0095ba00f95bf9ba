package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

func TestTemplates(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	r := c.Do("GET", "/sandboxes/templates", tokA, nil, nil)
	type tpl struct {
		Name       string   `json:"name"`
		VCPU       float64  `json:"vcpu"`
		MemoryMb   int      `json:"memoryMb"`
		HomeDiskMb int      `json:"homeDiskMb"`
		TmpDiskMb  int      `json:"tmpDiskMb"`
		Languages  []string `json:"languages"`
	}
	got := map[string]tpl{}
	for _, x := range apitest.DecodeData[[]tpl](t, r) {
		got[x.Name] = x
	}
	want := map[string]string{"base": "", "python": "python", "node": "node"}
	if len(got) != len(want) {
		t.Fatalf("templates: %+v", got)
	}
	for name, lang := range want {
		x, ok := got[name]
		if !ok {
			t.Fatalf("template %s missing", name)
		}
		if strings.Join(x.Languages, ",") != lang {
			t.Errorf("%s languages = %v, want %q", name, x.Languages, lang)
		}
		if x.HomeDiskMb != 2048 || x.TmpDiskMb != 1024 || x.VCPU <= 0 || x.MemoryMb <= 0 {
			t.Errorf("%s size = %+v", name, x)
		}
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	r := c.Do("GET", "/health", "", nil, nil)
	got := apitest.DecodeData[struct {
		Mode string         `json:"mode"`
		Pool map[string]int `json:"pool"`
	}](t, r)
	if r.Status != 200 || got.Mode != "real" || len(got.Pool) != 3 {
		t.Fatalf("health: %d %+v", r.Status, got)
	}
}

func TestAuthAndScopes(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes", "", nil, nil), 401, "UNAUTHORIZED")
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes", "rc_pat_nope", nil, nil), 401, "UNAUTHORIZED")
	msg := apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokARead, map[string]any{}, nil), 403, "INSUFFICIENT_SCOPE")
	contains(t, msg, "services:write")
	// Scopes match exactly: write does not include read.
	msg = apitest.ExpectErr(t, c.Do("GET", "/sandboxes", tokAWrite, nil, nil), 403, "INSUFFICIENT_SCOPE")
	contains(t, msg, "services:read")
	r := c.Do("GET", "/sandboxes", tokARead, nil, nil)
	if r.Status != 200 {
		t.Fatalf("read token list: %d", r.Status)
	}
	// Unknown routes and methods answer with the envelope too.
	apitest.ExpectErr(t, c.Do("GET", "/nope", tokA, nil, nil), 404, "NOT_FOUND")
	r = c.Do("PATCH", "/sandboxes", tokA, map[string]any{}, nil)
	apitest.ExpectErr(t, r, 405, "METHOD_NOT_ALLOWED")
	if r.Header.Get("Allow") != "GET, POST" {
		t.Errorf("Allow = %q", r.Header.Get("Allow"))
	}
}

func TestSandboxLifecycle(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	created := c.Create(tokA, map[string]any{"template": "python", "timeoutMs": 120000, "labels": map[string]string{"suite": "lifecycle"}, "env": map[string]string{"GREETING": "hej"}})
	if !strings.HasPrefix(created.ID, "sbx-") || created.Template != "python" || created.TimeoutMs != 120000 {
		t.Fatalf("created = %+v", created)
	}
	ca, _ := time.Parse(time.RFC3339, created.CreatedAt)
	ea, _ := time.Parse(time.RFC3339, created.ExpiresAt)
	if d := ea.Sub(ca); d != 120*time.Second {
		t.Errorf("expiresAt - createdAt = %v", d)
	}
	if strings.Join(created.EnvKeys, ",") != "GREETING" {
		t.Errorf("envKeys = %v (values must never be returned)", created.EnvKeys)
	}
	if created.Status == "pending" {
		// Too early: the container is still starting.
		r := c.Do("POST", "/sandboxes/"+created.ID+"/commands", tokA, map[string]any{"cmd": "true"}, nil)
		apitest.ExpectErr(t, r, 409, "SANDBOX_NOT_READY")
		if r.Header.Get("Retry-After") == "" {
			t.Error("SANDBOX_NOT_READY without Retry-After")
		}
	}
	sb := c.WaitStatus(tokA, created.ID, apitest.WaitTimeout, "running")
	id := sb.ID

	// Commands: sh -c as uid 10001 in /home/user, with the sandbox's env.
	out := c.command(id, `id -u; pwd; echo "$GREETING" | tr a-z A-Z; echo oops >&2; exit 7`)
	if exitCode(t, out) != 7 || out.Stdout != "10001\n/home/user\nHEJ\n" || out.Stderr != "oops\n" {
		t.Fatalf("command = %+v", out)
	}
	out = c.command(id, `python -c "import sys; print(sys.version_info[0])" && pip --version >/dev/null && echo pip-ok`)
	if exitCode(t, out) != 0 || out.Stdout != "3\npip-ok\n" {
		t.Fatalf("python on PATH: %+v", out)
	}

	// run_code: each call a fresh process; pandas and numpy are there.
	r := c.Do("POST", "/sandboxes/"+id+"/run_code", tokA, map[string]any{"language": "python", "code": "import pandas as pd, numpy as np\nx = 41\nprint(int(np.int64(x) + 1), pd.__name__)"}, nil)
	res := apitest.DecodeData[apitest.ExecResult](t, r)
	if exitCode(t, res) != 0 || res.Stdout != "42 pandas\n" {
		t.Fatalf("run_code = %+v", res)
	}
	r = c.Do("POST", "/sandboxes/"+id+"/run_code", tokA, map[string]any{"language": "python", "code": "print(x)"}, nil)
	res = apitest.DecodeData[apitest.ExecResult](t, r)
	if exitCode(t, res) == 0 || !strings.Contains(res.Stderr, "NameError") {
		t.Fatalf("state carried over between run_code calls: %+v", res)
	}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+id+"/run_code", tokA, map[string]any{"language": "node", "code": "1"}, nil), 400, "LANGUAGE_NOT_AVAILABLE")
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+id+"/run_code", tokA, map[string]any{"language": "ruby", "code": "1"}, nil), 400, "INVALID_LANGUAGE")

	// Timeouts kill the command and say so.
	start := time.Now()
	r = c.Do("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": "echo started; sleep 30", "timeoutMs": 1000}, nil)
	res = apitest.DecodeData[apitest.ExecResult](t, r)
	if !res.TimedOut || res.ExitCode != nil || res.Stdout != "started\n" {
		t.Fatalf("timeout: %+v after %v", res, time.Since(start))
	}
	if out := c.command(id, "ps -eo args | grep -c '[s]leep 30' || true"); strings.TrimSpace(out.Stdout) != "0" {
		t.Fatalf("timed-out process still running: %+v", out)
	}

	// Output is capped without losing the exit code.
	out = c.command(id, `head -c 3000000 /dev/zero | tr '\0' a; exit 4`)
	if exitCode(t, out) != 4 || !out.StdoutTruncated || len(out.Stdout) != 1<<20 {
		t.Fatalf("cap: exit=%v truncated=%v len=%d", out.ExitCode, out.StdoutTruncated, len(out.Stdout))
	}

	// Preview URLs do not exist.
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+id+"/ports/8080", tokA, nil, nil), 501, "NOT_IMPLEMENTED")

	// Delete: 200, then 404 everywhere.
	r = c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil)
	if r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+id, tokA, nil, nil), 404, "NOT_FOUND")
	apitest.ExpectErr(t, c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil), 404, "NOT_FOUND")
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": "true"}, nil), 404, "NOT_FOUND")
}

func TestFiles(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	id := c.Running(tokA, map[string]any{"template": "base"}).ID
	path := "/sandboxes/" + id + "/files"

	content := "a,b\n1,2\n\ttabs, ünïcödé ✓, emoji 🚀, CRLF\r\n, no trailing newline"
	r := c.Do("PUT", path, tokA, map[string]any{"path": "/home/user/deep/er/data.csv", "content": content}, nil)
	if r.Status != 200 {
		t.Fatalf("write: %d %+v", r.Status, r.Env.Error)
	}
	got := apitest.DecodeData[struct{ Path, Content string }](t, c.Do("GET", path+"?path=/home/user/deep/er/data.csv", tokA, nil, nil))
	if got.Content != content || got.Path != "/home/user/deep/er/data.csv" {
		t.Fatalf("read back %q", got.Content)
	}
	// The file belongs to the sandbox user and is visible to commands.
	out := c.command(id, "stat -c %u /home/user/deep/er/data.csv && wc -c < /home/user/deep/er/data.csv")
	if out.Stdout != fmt.Sprintf("10001\n%d\n", len(content)) {
		t.Fatalf("stat = %+v", out)
	}
	// /tmp is writable too; an empty file is a file.
	if r := c.Do("PUT", path, tokA, map[string]any{"path": "/tmp/empty", "content": ""}, nil); r.Status != 200 {
		t.Fatalf("write /tmp: %d", r.Status)
	}
	if got := apitest.DecodeData[struct{ Content string }](t, c.Do("GET", path+"?path=/tmp/empty", tokA, nil, nil)); got.Content != "" {
		t.Fatalf("empty file: %q", got.Content)
	}

	apitest.ExpectErr(t, c.Do("GET", path+"?path=/home/user/missing.txt", tokA, nil, nil), 404, "FILE_NOT_FOUND")
	apitest.ExpectErr(t, c.Do("GET", path+"?path=relative.txt", tokA, nil, nil), 400, "INVALID_PATH")
	apitest.ExpectErr(t, c.Do("GET", path+"?path=/home/user", tokA, nil, nil), 400, "IS_A_DIRECTORY")
	apitest.ExpectErr(t, c.Do("PUT", path, tokA, map[string]any{"path": "home/user/x", "content": "x"}, nil), 400, "INVALID_PATH")
	msg := apitest.ExpectErr(t, c.Do("PUT", path, tokA, map[string]any{"path": "/etc/evil", "content": "x"}, nil), 403, "PERMISSION_DENIED")
	contains(t, msg, "/etc/evil")
	apitest.ExpectErr(t, c.Do("PUT", path, tokA, map[string]any{"path": "/usr/local/bin/x", "content": "x"}, nil), 403, "PERMISSION_DENIED")

	// Exactly the limit is fine; one character more is not.
	big := strings.Repeat("é", 1_000_000)
	if r := c.Do("PUT", path, tokA, map[string]any{"path": "/home/user/big.txt", "content": big}, nil); r.Status != 200 {
		t.Fatalf("1,000,000 characters: %d %+v", r.Status, r.Env.Error)
	}
	if got := apitest.DecodeData[struct{ Content string }](t, c.Do("GET", path+"?path=/home/user/big.txt", tokA, nil, nil)); got.Content != big {
		t.Fatalf("big file read back with %d bytes", len(got.Content))
	}
	apitest.ExpectErr(t, c.Do("PUT", path, tokA, map[string]any{"path": "/home/user/big2.txt", "content": big + "x"}, nil), 413, "PAYLOAD_TOO_LARGE")
	// A binary file is reported, not mangled.
	c.command(id, `printf '\377\376' > /home/user/bin.dat`)
	apitest.ExpectErr(t, c.Do("GET", path+"?path=/home/user/bin.dat", tokA, nil, nil), 422, "FILE_NOT_TEXT")
}

func TestCrossAccountIsNotFound(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	id := c.Running(tokA, map[string]any{"labels": map[string]string{"owner": "a"}}).ID
	missing := "sbx-doesnotexist"
	for _, probe := range []struct {
		method, suffix string
		body           any
	}{
		{"GET", "", nil},
		{"DELETE", "", nil},
		{"POST", "/commands", map[string]any{"cmd": "true"}},
		{"POST", "/run_code", map[string]any{"language": "python", "code": "1"}},
		{"PUT", "/files", map[string]any{"path": "/tmp/x", "content": "x"}},
		{"GET", "/files?path=/tmp/x", nil},
		{"GET", "/logs", nil},
		{"POST", "/ports/80", nil},
	} {
		other := c.Do(probe.method, "/sandboxes/"+id+probe.suffix, tokB, probe.body, nil)
		none := c.Do(probe.method, "/sandboxes/"+missing+probe.suffix, tokB, probe.body, nil)
		apitest.ExpectErr(t, other, 404, "NOT_FOUND")
		apitest.ExpectErr(t, none, 404, "NOT_FOUND")
		if strings.ReplaceAll(other.Env.Error.Message, id, "ID") != strings.ReplaceAll(none.Env.Error.Message, missing, "ID") {
			t.Errorf("%s %s: other account %q vs missing %q", probe.method, probe.suffix, other.Env.Error.Message, none.Env.Error.Message)
		}
	}
	for _, sb := range apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes", tokB, nil, nil)) {
		if sb.ID == id {
			t.Fatal("account b lists account a's sandbox")
		}
	}
	// Still alive for its owner.
	if out := c.command(id, "echo alive"); out.Stdout != "alive\n" {
		t.Fatalf("owner lost the sandbox: %+v", out)
	}
}

func TestListFiltersByLabel(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	run := fmt.Sprintf("r%d", time.Now().UnixNano())
	a := c.Create(tokA, map[string]any{"labels": map[string]string{"run": run, "role": "web"}})
	b := c.Create(tokA, map[string]any{"labels": map[string]string{"run": run, "role": "db"}})
	ids := func(path string) string {
		var out []string
		for _, sb := range apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", path, tokA, nil, nil)) {
			out = append(out, sb.ID)
		}
		return strings.Join(out, ",")
	}
	if got := ids("/sandboxes?label=run=" + run); got != a.ID+","+b.ID {
		t.Fatalf("by run: %s", got)
	}
	if got := ids("/sandboxes?label=run=" + run + "&label=role=db"); got != b.ID {
		t.Fatalf("by run and role: %s", got)
	}
	if got := ids("/sandboxes?label=run=" + run + "&label=role=cache"); got != "" {
		t.Fatalf("no match: %s", got)
	}
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes?label=novalue", tokA, nil, nil), 400, "INVALID_LABEL_FILTER")
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"unknown template", map[string]any{"template": "ruby"}, 400, "UNKNOWN_TEMPLATE"},
		{"timeout too small", map[string]any{"timeoutMs": 999}, 400, "INVALID_TIMEOUT"},
		{"timeout too large", map[string]any{"timeoutMs": 86400001}, 400, "INVALID_TIMEOUT"},
		{"timeout negative", map[string]any{"timeoutMs": -5}, 400, "INVALID_TIMEOUT"},
		{"timeout fraction", `{"timeoutMs": 1500.5}`, 400, "INVALID_REQUEST"},
		{"timeout overflow", `{"timeoutMs": 99999999999999999999999}`, 400, "INVALID_REQUEST"},
		{"timeout string", `{"timeoutMs": "300000"}`, 400, "INVALID_REQUEST"},
		{"malformed", `{"template": `, 400, "INVALID_JSON"},
		{"not an object", `[1,2]`, 400, "INVALID_REQUEST"},
		{"trailing data", `{} {}`, 400, "INVALID_JSON"},
		{"empty body", ``, 400, "INVALID_JSON"},
		{"unknown field", map[string]any{"tempalte": "python"}, 400, "UNKNOWN_FIELD"}, //nolint:misspell // the misspelt field is the point
		{"non-UTF-8", []byte("{\"template\": \"\xff\"}"), 400, "INVALID_ENCODING"},
		{"bad label key", map[string]any{"labels": map[string]string{"bad key": "x"}}, 400, "INVALID_LABELS"},
		{"bad env name", map[string]any{"env": map[string]string{"1X": "x"}}, 400, "INVALID_ENV"},
		{"bad image", map[string]any{"image": "UPPER/Case::bad"}, 400, "INVALID_IMAGE"},
		{"NUL in cmd", map[string]any{"cmd": []string{"a\x00b"}}, 400, "INVALID_COMMAND"},
		{"too large", `{"labels":{"x":"` + strings.Repeat("a", 9<<20) + `"}}`, 413, "PAYLOAD_TOO_LARGE"},
		{"image not present", map[string]any{"image": "registry.invalid/nothing/here:1"}, 422, "IMAGE_PULL_FAILED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc := *c.Client
			cc.T = t
			msg := apitest.ExpectErr(t, cc.Do("POST", "/sandboxes", tokA, tc.body, nil), tc.status, tc.code)
			if len(msg) < 10 {
				t.Errorf("message too terse: %q", msg)
			}
		})
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	key := fmt.Sprintf("key-%d", time.Now().UnixNano())
	body := map[string]any{"template": "base", "labels": map[string]string{"idem": key}}
	first := c.Do("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": key})
	sb := apitest.DecodeData[apitest.Sandbox](t, first)
	t.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil) })
	if first.Status != 201 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d replayed=%q", first.Status, first.Header.Get("Idempotent-Replayed"))
	}
	again := c.Do("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": key})
	if again.Status != 201 || again.Header.Get("Idempotent-Replayed") != "true" || apitest.DecodeData[apitest.Sandbox](t, again).ID != sb.ID {
		t.Fatalf("replay: %d %q %s", again.Status, again.Header.Get("Idempotent-Replayed"), again.Env.Data)
	}
	other := map[string]any{"template": "python", "labels": map[string]string{"idem": key}}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, other, map[string]string{"Idempotency-Key": key}), 422, "IDEMPOTENCY_KEY_REUSED")
	// Keys are per account.
	theirs := c.Do("POST", "/sandboxes", tokB, body, map[string]string{"Idempotency-Key": key})
	tb := apitest.DecodeData[apitest.Sandbox](t, theirs)
	t.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+tb.ID, tokB, nil, nil) })
	if tb.ID == sb.ID || theirs.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("account b got account a's sandbox")
	}
	// Exactly one sandbox was made for the key.
	if n := len(apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes?label=idem="+key, tokA, nil, nil))); n != 1 {
		t.Fatalf("%d sandboxes for one key", n)
	}
	// A failed create spends the key: the same answer comes back.
	bad := map[string]any{"template": "nope"}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, bad, map[string]string{"Idempotency-Key": key + "-bad"}), 400, "UNKNOWN_TEMPLATE")
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"image": "registry.invalid/x:1"}, map[string]string{"Idempotency-Key": key + "-img"}), 422, "IMAGE_PULL_FAILED")
	r := c.Do("POST", "/sandboxes", tokA, map[string]any{"image": "registry.invalid/x:1"}, map[string]string{"Idempotency-Key": key + "-img"})
	apitest.ExpectErr(t, r, 422, "IMAGE_PULL_FAILED")
	if r.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("failed create was not replayed")
	}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": "bad\tkey"}), 400, "INVALID_IDEMPOTENCY_KEY")
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}), 400, "INVALID_IDEMPOTENCY_KEY")
}

func TestConcurrentIdempotentCreates(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	key := fmt.Sprintf("race-%d", time.Now().UnixNano())
	body := map[string]any{"labels": map[string]string{"race": key}}
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, env := c.Raw("POST", "/sandboxes", tokA, body, nil)
			_ = env
			codes[i] = st
		}()
	}
	wg.Wait()
	_ = codes
	// Without a key every request is its own sandbox.
	if n := len(apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes?label=race="+key, tokA, nil, nil))); n != 3 {
		t.Fatalf("%d sandboxes without keys, want 3", n)
	}
	t.Cleanup(func() { cleanupLabel(c, tokA, "race="+key) })

	key2 := key + "-k"
	body2 := map[string]any{"labels": map[string]string{"race": key2}}
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.Do("POST", "/sandboxes", tokA, body2, map[string]string{"Idempotency-Key": key2})
			statuses[i] = r.Status
			if r.Status == 409 && (r.Env.Error.Code != "IDEMPOTENCY_IN_PROGRESS" || r.Header.Get("Retry-After") == "") {
				t.Errorf("409 without IDEMPOTENCY_IN_PROGRESS and Retry-After: %+v", r.Env.Error)
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() { cleanupLabel(c, tokA, "race="+key2) })
	for _, st := range statuses {
		if st != 201 && st != 409 {
			t.Fatalf("statuses %v", statuses)
		}
	}
	if n := len(apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes?label=race="+key2, tokA, nil, nil))); n != 1 {
		t.Fatalf("%d sandboxes for one key under concurrency, want 1", n)
	}
}

func cleanupLabel(c *client, tok, label string) {
	_, env := c.Raw("GET", "/sandboxes?label="+label, tok, nil, nil)
	var list []apitest.Sandbox
	_ = jsonUnmarshal(env.Data, &list)
	for _, sb := range list {
		c.Raw("DELETE", "/sandboxes/"+sb.ID, tok, nil, nil)
	}
}

func TestRunMode(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	fail := c.Create(tokA, map[string]any{"cmd": []string{"sh", "-c", "echo out; sleep 0.2; echo err >&2; sleep 0.2; echo done; exit 3"}})
	ok := c.Create(tokA, map[string]any{"entrypoint": []string{"python3", "-c"}, "cmd": []string{"print('fine')"}, "template": "python"})
	if !fail.RunMode || !ok.RunMode || fail.ExitCode != nil {
		t.Fatalf("run mode not set: %+v %+v", fail, ok)
	}
	f := c.WaitStatus(tokA, fail.ID, apitest.WaitTimeout, "exited", "terminated")
	if f.Status != "exited" || f.ExitCode == nil || *f.ExitCode != 3 {
		t.Fatalf("failing job: %+v", f)
	}
	o := c.WaitStatus(tokA, ok.ID, apitest.WaitTimeout, "exited", "terminated")
	if o.Status != "exited" || o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("ok job: %+v", o)
	}
	logs := apitest.DecodeData[struct{ Logs string }](t, c.Do("GET", "/sandboxes/"+fail.ID+"/logs", tokA, nil, nil))
	if logs.Logs != "out\nerr\ndone\n" {
		t.Fatalf("logs = %q", logs.Logs)
	}
	logs = apitest.DecodeData[struct{ Logs string }](t, c.Do("GET", "/sandboxes/"+ok.ID+"/logs", tokA, nil, nil))
	if logs.Logs != "fine\n" {
		t.Fatalf("logs = %q", logs.Logs)
	}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+fail.ID+"/commands", tokA, map[string]any{"cmd": "true"}, nil), 409, "SANDBOX_NOT_RUNNING")
	// The record stays readable after the program ended, and deletes like any other.
	if r := c.Do("DELETE", "/sandboxes/"+fail.ID, tokA, nil, nil); r.Status != 200 {
		t.Fatalf("delete exited: %d", r.Status)
	}
}

// TestExpiry: a sandbox is gone (404) once its lifetime has passed, never
// before its expiresAt, and leaves no container. The lifetime counts from
// creation, so on a loaded machine a 5 s sandbox may expire before its
// container has started: both ways (expired while running, expired while
// still starting) are honest expiries and must leave nothing behind.
func TestExpiry(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	sb := c.Create(tokA, map[string]any{"timeoutMs": 5000})
	expiresAt, err := time.Parse(sandbox.TimeFormat, sb.ExpiresAt)
	if err != nil {
		t.Fatalf("expiresAt %q: %v", sb.ExpiresAt, err)
	}
	deadline := expiresAt.Add(60 * time.Second)
	seen := map[string]bool{}
	for {
		r := c.Do("GET", "/sandboxes/"+sb.ID, tokA, nil, nil)
		if r.Status == http.StatusNotFound {
			if now := time.Now(); now.Before(expiresAt) {
				t.Fatalf("sandbox gone at %s, before its expiresAt %s", now.UTC().Format(time.RFC3339Nano), sb.ExpiresAt)
			}
			break
		}
		if r.Status != http.StatusOK {
			t.Fatalf("GET: %v", r)
		}
		seen[apitest.DecodeData[apitest.Sandbox](t, r).Status] = true
		if time.Now().After(deadline) {
			t.Fatalf("sandbox still there 60 s after its expiresAt: %s", r.Env.Data)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("statuses seen before expiry: %v", seen)
	if seen["exited"] || seen["terminated"] {
		t.Fatalf("the sandbox ended another way before expiring: %v", seen)
	}
	if n := ownedContainers(t, shared, sb.ID); n != 0 {
		t.Fatalf("%d containers left after expiry", n)
	}
}

// TestFilePathsStayInside: paths with .., symlinks pointing out of the
// writable areas and odd names never change anything outside /home/user
// and /tmp, and each answer says what happened.
func TestFilePathsStayInside(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	id := c.Running(tokA, map[string]any{}).ID
	path := "/sandboxes/" + id + "/files"
	out := c.command(id, "ln -s /etc/passwd /home/user/link && ln -s /etc /home/user/etcdir && md5sum /etc/passwd")
	before := out.Stdout
	put := func(p, content string) apitest.Response {
		return c.Do("PUT", path, tokA, map[string]any{"path": p, "content": content}, nil)
	}
	// A symlink at the path is replaced, never followed.
	if r := put("/home/user/link", "mine"); r.Status != 200 {
		t.Fatalf("write over symlink: %d %+v", r.Status, r.Env.Error)
	}
	apitest.ExpectErr(t, put("/home/user/etcdir/evil", "x"), 403, "PERMISSION_DENIED")
	apitest.ExpectErr(t, put("/home/user/../../etc/evil", "x"), 403, "PERMISSION_DENIED")
	apitest.ExpectErr(t, put("/home/user/link/x", "x"), 400, "INVALID_PATH")
	apitest.ExpectErr(t, put("/home/user/"+strings.Repeat("n", 300), "x"), 400, "INVALID_PATH")
	apitest.ExpectErr(t, put("/proc/1/environ", "x"), 403, "PERMISSION_DENIED")
	if r := put("/tmp/../home/user/ok.txt", "ok"); r.Status != 200 {
		t.Fatalf("write through ..: %d", r.Status)
	}
	out = c.command(id, "md5sum /etc/passwd; cat /home/user/ok.txt; echo; [ -L /home/user/link ] && echo still-link || { cat /home/user/link; echo; }; ls /etc/evil 2>&1 | grep -c 'No such'")
	want := before + "ok\nmine\n1\n"
	if out.Stdout != want {
		t.Fatalf("after hostile writes:\n%s\nwant:\n%s", out.Stdout, want)
	}
}

// TestWaitFor: a GET with waitFor answers when the status changes, in one
// call, instead of the client polling.
func TestWaitFor(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	sb := c.Create(tokA, map[string]any{})
	r := c.Do("GET", "/sandboxes/"+sb.ID+"?waitFor=running&timeoutMs=60000", tokA, nil, nil)
	if got := apitest.DecodeData[apitest.Sandbox](t, r); got.Status != "running" {
		t.Fatalf("waitFor=running answered %s", got.Status)
	}
	// A run-mode job: waiting for running still returns once it has ended.
	job := c.Create(tokA, map[string]any{"cmd": []string{"sh", "-c", "exit 9"}})
	r = c.Do("GET", "/sandboxes/"+job.ID+"?waitFor=exited&timeoutMs=60000", tokA, nil, nil)
	if got := apitest.DecodeData[apitest.Sandbox](t, r); got.Status != "exited" || got.ExitCode == nil || *got.ExitCode != 9 {
		t.Fatalf("waitFor=exited answered %+v", got)
	}
	// Time up: the sandbox as it is.
	start := time.Now()
	r = c.Do("GET", "/sandboxes/"+sb.ID+"?waitFor=exited&timeoutMs=300", tokA, nil, nil)
	if got := apitest.DecodeData[apitest.Sandbox](t, r); got.Status != "running" || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("timed-out wait answered %s after %v", got.Status, time.Since(start))
	}
	// Deleted while waiting: 404.
	go func() {
		time.Sleep(300 * time.Millisecond)
		c.Raw("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil)
	}()
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+sb.ID+"?waitFor=exited", tokA, nil, nil), 404, "NOT_FOUND")
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+job.ID+"?waitFor=done", tokA, nil, nil), 400, "INVALID_REQUEST")
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+job.ID+"?waitFor=running&timeoutMs=600000", tokA, nil, nil), 400, "INVALID_TIMEOUT")
	// Another account waits for nothing.
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+job.ID+"?waitFor=running", tokB, nil, nil), 404, "NOT_FOUND")
}
