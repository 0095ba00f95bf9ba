package store

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRecordsKeepNoHTMLEscapes: a record full of '<', '>' and '&' (a
// command's kept output, a sandbox's arguments) is written at about its
// own size, not six times it as json.Marshal's escapes made it, and
// reads back the same.
func TestRecordsKeepNoHTMLEscapes(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("<&>", 20000)
	out, err := Encode(map[string]string{"stdout": text}) // as the lifecycle encodes it
	if err != nil {
		t.Fatal(err)
	}
	rec := &ExecKey{SandboxID: "sbx-a", Key: "k", RequestHash: "h", CreatedAt: time.Now().UTC(), Done: true, Output: out}
	if err := s.PutExecKey(rec); err != nil {
		t.Fatal(err)
	}
	sb := &Sandbox{ID: "sbx-a", Account: "acct", Status: "running", Cmd: []string{text}}
	if err := s.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{s.execKeyPath("sbx-a", "k"), s.dir + "/" + sandboxDir + "/sbx-a.json"} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if most := int64(len(text)) + 1024; fi.Size() > most {
			t.Errorf("%s: %d bytes for %d of text, at most %d", path, fi.Size(), len(text), most)
		}
	}
	keys, err := s.ExecKeys()
	if err != nil || len(keys) != 1 {
		t.Fatalf("exec keys: %v %v", keys, err)
	}
	var got map[string]string
	if err := json.Unmarshal(keys[0].Output, &got); err != nil || got["stdout"] != text {
		t.Fatalf("the kept output does not read back: %v", err)
	}
}
