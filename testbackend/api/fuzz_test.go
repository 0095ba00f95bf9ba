package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	sbxpkg "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// The fuzz targets drive the HTTP layer of a test-mode backend in process:
// decoding and validation are the same as in real mode, and no engine is
// needed. `go test` runs the seed corpus; `go test -fuzz=FuzzX` explores.

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
		m, err := sbxpkg.New(sbxpkg.Config{Mode: sbxpkg.ModeTest, Store: st})
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
			Data struct{ ID string } `json:"data"`
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
	r := httptest.NewRequest(method, "http://backend.test/", strings.NewReader(body))
	r.URL = &url.URL{Path: target}
	if i := strings.IndexByte(target, '?'); i >= 0 {
		r.URL = &url.URL{Path: target[:i], RawQuery: target[i+1:]}
	}
	r.Header.Set("Authorization", "Bearer "+tokA)
	return r
}

// checkAnswer asserts the documented envelope: valid JSON, ok matching the
// status, an UPPER_SNAKE code and a message on errors, never a 500.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
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
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.OK == nil {
		t.Fatalf("status %d: not the envelope: %v %q", rec.Code, err, rec.Body.String())
	}
	if rec.Code >= 500 {
		t.Fatalf("server error %d: %s", rec.Code, rec.Body.String())
	}
	if *env.OK != (rec.Code < 300) || !env.Mocked {
		t.Fatalf("status %d with ok=%v mocked=%v", rec.Code, *env.OK, env.Mocked)
	}
	if !*env.OK {
		if env.Error == nil || env.Error.Message == "" || strings.Trim(env.Error.Code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
			t.Fatalf("status %d: bad error %s", rec.Code, rec.Body.String())
		}
	}
}

func FuzzCreateBody(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"template":"python","timeoutMs":300000}`, `{"timeoutMs":-1}`, `{"timeoutMs":1e309}`,
		`{"timeoutMs":9223372036854775808}`, `{"timeoutMs":"1"}`, `{"template":null}`, `[]`, `"x"`, `null`,
		`{"labels":{"a":"b","":"x"}}`, `{"env":{"A":1}}`, `{"cmd":"ls"}`, `{"entrypoint":[null]}`,
		`{"image":"a:b@sha256:00"}`, `{"run":"yes"}`, "{\"template\":\"\xff\"}", `{"template":"base"}{}`,
		`{"unknown":1}`, `{"labels":{"k":"` + strings.Repeat("v", 300) + `"}}`, "\x00", `{"env":{"A":"\u0000"}}`,
	} {
		f.Add(seed, "")
	}
	f.Add(`{}`, "key-1")
	f.Add(`{"template":"node"}`, "key-1")
	f.Add(`{}`, "bad\x01key")
	f.Fuzz(func(t *testing.T, body, key string) {
		srv, _ := fuzzServer(t)
		rec := httptest.NewRecorder()
		req := fuzzRequest("POST", "/v1/sandboxes", body)
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		srv.ServeHTTP(rec, req)
		checkAnswer(t, rec)
		if rec.Code == 201 {
			// Whatever was accepted reads back as a valid sandbox.
			var env struct {
				Data sbxpkg.View `json:"data"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || !strings.HasPrefix(env.Data.ID, "sbx-") {
				t.Fatalf("accepted create answered %s", rec.Body.String())
			}
			if env.Data.TimeoutMs < sbxpkg.MinTimeoutMs || env.Data.TimeoutMs > sbxpkg.MaxTimeoutMs {
				t.Fatalf("accepted timeout %d", env.Data.TimeoutMs)
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
	f.Fuzz(func(t *testing.T, body string) {
		srv, id := fuzzServer(t)
		for _, route := range []string{"/commands", "/run_code"} {
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, fuzzRequest("POST", "/v1/sandboxes/"+id+route, body))
			checkAnswer(t, rec)
		}
	})
}

func FuzzFilePaths(f *testing.F) {
	for _, seed := range []string{
		"/home/user/a.txt", "relative", "", "/home/user/../../etc/passwd", "/tmp/\x00x", "/" + strings.Repeat("a", 5000),
		"/home/user/ü/✓", "//double//slash", "/home/user/.", "/\xff\xfe", "/home/user/x?y=z", "/home/user/%2e%2e/etc",
	} {
		f.Add(seed, "content")
	}
	f.Fuzz(func(t *testing.T, path, content string) {
		srv, id := fuzzServer(t)
		body, _ := json.Marshal(map[string]string{"path": path, "content": content})
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, fuzzRequest("PUT", "/v1/sandboxes/"+id+"/files", string(body)))
		checkAnswer(t, rec)
		wrote := rec.Code == 200
		if wrote && (!strings.HasPrefix(path, "/") || strings.IndexByte(path, 0) >= 0) {
			t.Fatalf("accepted path %q", path)
		}
		// JSON carries text: invalid UTF-8 arrived as U+FFFD, in the path too.
		sent, want := viaJSON(path), viaJSON(content)
		rec = httptest.NewRecorder()
		srv.ServeHTTP(rec, fuzzRequest("GET", "/v1/sandboxes/"+id+"/files?path="+url.QueryEscape(sent), ""))
		checkAnswer(t, rec)
		if wrote {
			var env struct {
				Data struct{ Content string } `json:"data"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &env)
			if rec.Code != 200 || env.Data.Content != want {
				t.Fatalf("read back %d %q, wrote %q", rec.Code, env.Data.Content, want)
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
	f.Fuzz(func(t *testing.T, method, target string) {
		if method == "" || strings.ContainsAny(method, " \t\r\n") || method == "CONNECT" {
			return
		}
		srv, _ := fuzzServer(t)
		if _, err := http.NewRequest(method, "http://backend.test/", nil); err != nil {
			return // not a method a client can send
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, fuzzRequest(method, target, "{}"))
		if method == "HEAD" {
			return
		}
		checkAnswer(t, rec)
	})
}
