package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	sbxpkg "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
)

// The fuzz targets drive two backends: a test-mode one in process (no
// engine, fast) and the package's real-mode backend over HTTP, whose error
// paths reach the engine and real sandboxes. `go test` runs the seed corpus
// against both; `go test -fuzz=FuzzX` explores (make soak fuzzes the real
// one for a bounded time). Every answer must be the documented envelope,
// match openapi.yaml, and never be a 5xx.

var (
	fuzzOnce sync.Once
	fuzzSrv  http.Handler
	fuzzID   string
)

func fuzzServer(t testing.TB) (http.Handler, string) {
	fuzzOnce.Do(func() {
		// Not t.TempDir: the server outlives the first input that starts it.
		dir, err := os.MkdirTemp("", "rarecloud-fuzz-") //nolint:usetesting // outlives the input that starts it
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := testmode.Open(filepath.Join(dir, "testmode"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := sbxpkg.New(sbxpkg.Config{Mode: sbxpkg.ModeTest, Runtime: rt, Store: st})
		if err != nil {
			t.Fatal(err)
		}
		var toks []api.Token
		for _, tk := range testTokens() {
			toks = append(toks, api.Token{Token: tk.Token, Account: tk.Account, Scopes: tk.Scopes})
		}
		fuzzSrv = api.New(m, toks, nil)
		rec := httptest.NewRecorder()
		fuzzSrv.ServeHTTP(rec, fuzzRequest("POST", "/v1/sandboxes", `{"template":"python"}`))
		var env struct {
			Data sbxpkg.View `json:"data"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		fuzzID = env.Data.ID
	})
	if fuzzID == "" {
		t.Fatal("fuzz backend did not start")
	}
	return fuzzSrv, fuzzID
}

func fuzzRequest(method, target, body string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://backend.test/", strings.NewReader(body))
	r.Method = method // any string: the server must answer it with the envelope
	r.URL = &url.URL{Path: target}
	if i := strings.IndexByte(target, '?'); i >= 0 {
		r.URL = &url.URL{Path: target[:i], RawQuery: target[i+1:]}
	}
	r.Header.Set("Authorization", "Bearer "+tokA)
	return r
}

// fuzzTarget is one backend the inputs go to.
type fuzzTarget struct {
	name   string
	mocked bool   // what its answers say in "mocked"
	id     string // a running sandbox of account a
	// send delivers the request; ok is false when no HTTP client could
	// send it (an invalid method or a control character in the URL).
	send func(t *testing.T, req *http.Request, body string) (res *http.Response, data []byte, ok bool)
}

var (
	realFuzzOnce sync.Once
	realFuzzID   string
)

// fuzzTargets are the test-mode backend and the real-mode one. The first
// call starts both and a running sandbox in the real one, which can take
// longer than the 10 s the fuzzing engine grants one input before it calls
// the worker hung: every fuzz target calls it before f.Fuzz (in each worker
// process too), so no input pays for it.
func fuzzTargets(t testing.TB) []fuzzTarget {
	t.Helper()
	srv, id := fuzzServer(t)
	mock := fuzzTarget{name: "test mode", mocked: true, id: id, send: func(_ *testing.T, req *http.Request, _ string) (*http.Response, []byte, bool) {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Result(), rec.Body.Bytes(), true
	}}
	c := realBackend(t)
	realFuzzOnce.Do(func() {
		// Not c.Running: the sandbox outlives the input that makes it (TestMain deletes it).
		code, env := c.Raw("POST", "/sandboxes", tokA, map[string]any{"template": "python", "labels": map[string]string{"fuzz": "real"}}, nil)
		var sb apitest.Sandbox
		if code != http.StatusCreated || json.Unmarshal(env.Data, &sb) != nil {
			return
		}
		c.WaitStatus(tokA, sb.ID, apitest.WaitTimeout, "running")
		realFuzzID = sb.ID
	})
	if realFuzzID == "" {
		t.Fatal("the real-mode fuzz sandbox did not start")
	}
	base := strings.TrimSuffix(c.Base, "/v1")
	realMode := fuzzTarget{name: "real mode", id: realFuzzID, send: func(t *testing.T, req *http.Request, body string) (*http.Response, []byte, bool) {
		if !strings.HasPrefix(req.URL.Path, "/") {
			return nil, nil, false // an origin-form request line starts with "/"
		}
		out, err := http.NewRequest(req.Method, base+"/", strings.NewReader(body))
		if err != nil {
			return nil, nil, false
		}
		// A client sends the query as given; bytes no request line may
		// carry go percent-encoded, as any real client would send them
		// (net/http answers an unparseable request line itself, before
		// any handler runs).
		out.URL.Path, out.URL.RawQuery = req.URL.Path, wireQuery(req.URL.RawQuery)
		out.Header = req.Header.Clone()
		res, err := c.HTTP.Do(out)
		if err != nil {
			if strings.Contains(err.Error(), "invalid") {
				return nil, nil, false
			}
			t.Fatalf("%s %q: %v", req.Method, req.URL, err)
		}
		defer res.Body.Close()
		data, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, data, true
	}}
	return []fuzzTarget{mock, realMode}
}

// wireQuery percent-encodes the bytes of q that cannot appear in a
// request line.
func wireQuery(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if c := q[i]; c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// fuzzDo sends one request to every target and checks every answer; it
// returns the answers that were sent, by target name.
func fuzzDo(t *testing.T, targets []fuzzTarget, build func(tg fuzzTarget) (*http.Request, string)) map[string]fuzzAnswer {
	t.Helper()
	out := map[string]fuzzAnswer{}
	for _, tg := range targets {
		req, body := build(tg)
		res, data, ok := tg.send(t, req, body)
		if !ok {
			continue
		}
		if req.Method != http.MethodHead {
			checkAnswer(t, tg, req, res, data)
		}
		if res.StatusCode == http.StatusCreated && !tg.mocked {
			// Whatever route made a real sandbox, it goes at once: a fuzz
			// run makes thousands of requests, and the account's capacity
			// is not what is being fuzzed.
			var env struct {
				Data struct{ ID string } `json:"data"`
			}
			if json.Unmarshal(data, &env) == nil && strings.HasPrefix(env.Data.ID, "sbx-") {
				realBackend(t).Raw("DELETE", "/sandboxes/"+env.Data.ID, tokA, nil, nil)
			}
		}
		out[tg.name] = fuzzAnswer{code: res.StatusCode, body: data}
	}
	return out
}

type fuzzAnswer struct {
	code int
	body []byte
}

// checkAnswer asserts the documented envelope: valid JSON, ok matching the
// status, an UPPER_SNAKE code and a message on errors, never a 5xx, and an
// answer openapi.yaml allows.
func checkAnswer(t *testing.T, tg fuzzTarget, req *http.Request, res *http.Response, data []byte) {
	t.Helper()
	var env struct {
		OK     *bool           `json:"ok"`
		Mocked bool            `json:"mocked"`
		Data   json.RawMessage `json:"data"`
		Error  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil || env.OK == nil {
		t.Fatalf("%s: status %d: not the envelope: %v %q", tg.name, res.StatusCode, err, data)
	}
	if res.StatusCode >= 500 {
		t.Fatalf("%s: server error %d: %s", tg.name, res.StatusCode, data)
	}
	if *env.OK != (res.StatusCode < 300) || env.Mocked != tg.mocked {
		t.Fatalf("%s: status %d with ok=%v mocked=%v", tg.name, res.StatusCode, *env.OK, env.Mocked)
	}
	if !*env.OK {
		if env.Error == nil || env.Error.Message == "" || strings.Trim(env.Error.Code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
			t.Fatalf("%s: status %d: bad error %s", tg.name, res.StatusCode, data)
		}
	}
	if err := apitest.Validate(req, res, data); err != nil {
		t.Fatalf("%s: %s %q: %v\n%s", tg.name, req.Method, req.URL, err, apitest.Truncate(data, 2000))
	}
}

func FuzzCreateBody(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"template":"python","timeoutMs":300000}`, `{"timeoutMs":-1}`, `{"timeoutMs":1e309}`,
		`{"timeoutMs":9223372036854775808}`, `{"timeoutMs":"1"}`, `{"template":null}`, `[]`, `"x"`, `null`,
		`{"labels":{"a":"b","":"x"}}`, `{"env":{"A":1}}`, `{"cmd":"ls"}`, `{"entrypoint":[null]}`,
		`{"image":"a:b@sha256:00"}`, `{"run":"yes"}`, "{\"template\":\"\xff\"}", `{"template":"base"}{}`,
		`{"unknown":1}`, `{"labels":{"k":"` + strings.Repeat("v", 300) + `"}}`, "\x00", `{"env":{"A":"\u0000"}}`,
		`{"timeoutMs":` + strings.Repeat("9", 33) + `}`, `{"idleTimeoutMs":-` + strings.Repeat("1", 40) + `}`,
		`{"labels":{"k":` + strings.Repeat("1", 40) + `}}`, strings.Repeat("1", 4000),
	} {
		f.Add(seed, "")
	}
	f.Add(`{}`, "key-1")
	f.Add(`{"template":"node"}`, "key-1")
	f.Add(`{}`, "bad\x01key")
	fuzzTargets(f)
	f.Fuzz(func(t *testing.T, body, key string) {
		targets := fuzzTargets(t)
		answers := fuzzDo(t, targets, func(fuzzTarget) (*http.Request, string) {
			req := fuzzRequest("POST", "/v1/sandboxes", body)
			if key != "" {
				req.Header["Idempotency-Key"] = []string{key}
			}
			return req, body
		})
		for name, a := range answers {
			if a.code != 201 {
				continue
			}
			// Whatever was accepted reads back as a valid sandbox.
			var env struct {
				Data sbxpkg.View `json:"data"`
			}
			if err := json.Unmarshal(a.body, &env); err != nil || !strings.HasPrefix(env.Data.ID, "sbx-") {
				t.Fatalf("%s: accepted create answered %s", name, a.body)
			}
			if env.Data.TimeoutMs < sbxpkg.MinTimeoutMs || env.Data.TimeoutMs > sbxpkg.MaxTimeoutMs {
				t.Fatalf("%s: accepted timeout %d", name, env.Data.TimeoutMs)
			}
		}
	})
}

func FuzzExecBodies(f *testing.F) {
	for _, seed := range []string{
		`{"cmd":"echo hi"}`, `{"cmd":""}`, `{"cmd":"x","timeoutMs":0}`, `{"cmd":"x","timeoutMs":600001}`,
		`{"language":"python","code":"print(1)"}`, `{"language":"ruby","code":""}`, `{"language":"node"}`,
		`{"cmd":["a"]}`, `{"cmd":"a\u0000b"}`, `{`, `{"path":"/tmp/x","content":"y"}`,
	} {
		f.Add(seed)
	}
	fuzzTargets(f)
	f.Fuzz(func(t *testing.T, body string) {
		targets := fuzzTargets(t)
		for _, route := range []string{"/commands", "/run_code"} {
			fuzzDo(t, targets, func(tg fuzzTarget) (*http.Request, string) {
				return fuzzRequest("POST", "/v1/sandboxes/"+tg.id+route, body), body
			})
		}
	})
}

func FuzzFilePaths(f *testing.F) {
	for _, seed := range []string{
		"/home/user/a.txt", "relative", "", "/home/user/../../etc/passwd", "/tmp/\x00x", "/" + strings.Repeat("a", 5000),
		"/home/user/ü/✓", "//double//slash", "/home/user/.", "/\xff\xfe", "/home/user/x?y=z", "/home/user/%2e%2e/etc",
		"/dev/zero", "/dev/urandom", "/dev/null", "/tmp", "/proc/self/fd/0",
	} {
		f.Add(seed, "content")
	}
	fuzzTargets(f)
	f.Fuzz(func(t *testing.T, path, content string) {
		targets := fuzzTargets(t)
		raw, _ := json.Marshal(map[string]string{"path": path, "content": content})
		body := string(raw)
		wrote := fuzzDo(t, targets, func(tg fuzzTarget) (*http.Request, string) {
			return fuzzRequest("PUT", "/v1/sandboxes/"+tg.id+"/files", body), body
		})
		for name, a := range wrote {
			if a.code == 200 && (!strings.HasPrefix(path, "/") || strings.IndexByte(path, 0) >= 0) {
				t.Fatalf("%s: accepted path %q", name, path)
			}
		}
		// JSON carries text: invalid UTF-8 arrived as U+FFFD, in the path too.
		sent, want := viaJSON(path), viaJSON(content)
		read := fuzzDo(t, targets, func(tg fuzzTarget) (*http.Request, string) {
			return fuzzRequest("GET", "/v1/sandboxes/"+tg.id+"/files?path="+url.QueryEscape(sent), ""), ""
		})
		for name, w := range wrote {
			if w.code != 200 {
				continue
			}
			var env struct {
				Data struct{ Content string } `json:"data"`
			}
			r := read[name]
			_ = json.Unmarshal(r.body, &env)
			if r.code != 200 || env.Data.Content != want {
				t.Fatalf("%s: read back %d %q, wrote %q", name, r.code, env.Data.Content, want)
			}
		}
	})
}

// viaJSON is the string as it arrives after a trip through JSON.
func viaJSON(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

func FuzzRoutes(f *testing.F) {
	for _, seed := range []string{
		"/v1/sandboxes", "/v1/sandboxes/", "/v1//sandboxes", "/v1/sandboxes/templates/x", "/v1/sandboxes/x/ports/",
		"/v1/sandboxes/x/ports/99999", "/v1/sandboxes?label=a", "/v1/sandboxes?label==", "/v1/sandboxes?label=a=b=c",
		"/v2/sandboxes", "/", "/v1/sandboxes/%00", "/v1/sandboxes/x/files", "/v1/health",
	} {
		f.Add("GET", seed)
		f.Add("POST", seed)
	}
	fuzzTargets(f)
	f.Fuzz(func(t *testing.T, method, target string) {
		// Every method string reaches the handler in process (the real
		// backend only gets what a client can send); HEAD has no body.
		fuzzDo(t, fuzzTargets(t), func(fuzzTarget) (*http.Request, string) {
			return fuzzRequest(method, target, "{}"), "{}"
		})
	})
}
