package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// readFileRaw reads path in sandbox id and returns the answer's body as
// it came, checked against openapi.yaml, and the content it carries.
func readFileRaw(t *testing.T, c *client, id, path string) (body []byte, content string) {
	t.Helper()
	req, err := http.NewRequest("GET", c.Base+"/sandboxes/"+id+"/files?path="+url.QueryEscape(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: reading the answer: %v", path, err)
	}
	if err := apitest.Validate(req, resp, body); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var env struct {
		Data struct{ Content string } `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &env) != nil {
		t.Fatalf("read %s: %d %s", path, resp.StatusCode, apitest.Truncate(body, 300))
	}
	return body, env.Data.Content
}

// TestAnswersAreNotHTMLEscaped: a file of the characters JSON's HTML
// escaping turns into six bytes each (<, >, &, U+2028, U+2029) comes back
// in a body of at most twice its size, as written; control characters are
// still escaped, as JSON requires. Test mode: the largest file a write
// takes.
func TestAnswersAreNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	id := c.Create(tokA, map[string]any{}).ID
	for name, content := range map[string]string{
		"/tmp/lt":    strings.Repeat("<", sandbox.MaxFileChars),
		"/tmp/mixed": strings.Repeat("<>&\u2028\u2029", sandbox.MaxFileChars/5),
		"/tmp/ctl":   "a\x01b\tc\nd\"e\\f<g",
	} {
		if r := c.Do("PUT", "/sandboxes/"+id+"/files", tokA, map[string]any{"path": name, "content": content}, nil); r.Status != http.StatusOK {
			t.Fatalf("write %s: %v", name, r)
		}
		body, got := readFileRaw(t, c, id, name)
		if got != content {
			t.Fatalf("%s read back as %d bytes %q…, wrote %d", name, len(got), apitest.Truncate([]byte(got), 40), len(content))
		}
		if len(content) > 1000 && len(body) > 2*len(content) {
			t.Errorf("%s: a file of %d bytes came back in a body of %d bytes (more than twice its size)", name, len(content), len(body))
		}
		if name == "/tmp/ctl" && !strings.Contains(string(body), `"content":"a\u0001b\tc\nd\"e\\f<g"`) {
			t.Errorf("%s: control characters not escaped as JSON needs: %s", name, body)
		}
	}
	// Error answers go through the same encoder.
	r := c.Do("GET", "/sandboxes/"+id+"/files?path="+url.QueryEscape("/tmp/<missing>&"), tokA, nil, nil)
	if msg := apitest.ExpectErr(t, r, http.StatusNotFound, "FILE_NOT_FOUND"); !strings.Contains(msg, "/tmp/<missing>&") {
		t.Errorf("message %q", msg)
	}
}

// TestLargeFileReadIsNotHTMLEscaped: in a real sandbox, a file of
// 8,000,000 '<' (under the 8 MiB read limit) comes back in a body of at
// most twice its size.
func TestLargeFileReadIsNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	id := c.Running(tokA, map[string]any{"template": "base"}).ID
	const size = 8_000_000
	if out := c.command(id, "head -c 8000000 /dev/zero | tr '\\0' '<' > /home/user/lt && wc -c < /home/user/lt"); out.Stdout != "8000000\n" {
		t.Fatalf("making the file: %v", out)
	}
	body, got := readFileRaw(t, c, id, "/home/user/lt")
	if len(got) != size || strings.Trim(got, "<") != "" {
		t.Fatalf("read back %d bytes %q…, want %d of '<'", len(got), apitest.Truncate([]byte(got), 40), size)
	}
	if len(body) > 2*size {
		t.Fatalf("a file of %d bytes came back in a body of %d bytes (more than twice its size)", size, len(body))
	}
}
