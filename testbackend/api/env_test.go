package api_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// recordsHolding lists the files under the data directory's records that
// contain value.
func recordsHolding(t *testing.T, dir, value string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(filepath.Join(dir, "records"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(value)) {
			hits = append(hits, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// sandboxID makes an id of the backend's own form.
func sandboxID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 15)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "sbx-" + base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding).EncodeToString(b)
}

func secretValue(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "env-secret-" + hex.EncodeToString(b)
}

// TestEnvValuesLeaveTheRecord: env values (write-only secrets among them)
// reach the sandbox, and once its container has started no value is left
// in the records directory; the names stay (envKeys). A create cut short
// before its container started still has them and is started again with
// them at the next start, after which they leave the record too.
func TestEnvValuesLeaveTheRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := startBackend(dir, testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b.URL())
	secret := secretValue(t)
	sb := c.Running(tokA, map[string]any{"env": map[string]string{"API_SECRET": secret}})
	if out := c.command(sb.ID, `printf %s "$API_SECRET"`); out.Stdout != secret {
		t.Fatalf("env in the sandbox: %+v", out)
	}
	if hits := recordsHolding(t, dir, secret); len(hits) != 0 {
		t.Errorf("the env value is still stored after the start: %v", hits)
	}
	if hits := recordsHolding(t, dir, "API_SECRET"); len(hits) != 1 {
		t.Errorf("the env name should stay in the sandbox's record: %v", hits)
	}
	if got := c.Get(tokA, sb.ID); !slices.Equal(got.EnvKeys, []string{"API_SECRET"}) {
		t.Errorf("envKeys: %v", got.EnvKeys)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// A create cut short: its record was written (pending, with the
	// values), its container never started.
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		t.Fatal(err)
	}
	cut := secretValue(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	short := &store.Sandbox{
		ID: sandboxID(t), Account: "acct-a", Status: "pending", Template: "base", Image: "rarecloud/sandbox-base:latest",
		CreatedAt: now, TimeoutMs: 600000, ExpiresAt: now.Add(10 * time.Minute),
		Env: map[string]string{"CUT_SECRET": cut}, EnvKeys: []string{"CUT_SECRET"},
	}
	if err := st.PutSandbox(short); err != nil {
		t.Fatal(err)
	}
	if hits := recordsHolding(t, dir, cut); len(hits) != 1 {
		t.Fatalf("the cut-short record should hold its values until it starts: %v", hits)
	}

	b2, err := startBackend(dir, testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	c = newClient(t, b2.URL())
	c.WaitStatus(tokA, short.ID, apitest.WaitTimeout, "running")
	if out := c.command(short.ID, `printf %s "$CUT_SECRET"`); out.Stdout != cut {
		t.Fatalf("the cut-short create was started again without its env: %+v", out)
	}
	// The first sandbox still has its env (from its container), after a
	// restart that found no value in its record.
	if out := c.command(sb.ID, `printf %s "$API_SECRET"`); out.Stdout != secret {
		t.Fatalf("env after a restart: %+v", out)
	}
	if hits := recordsHolding(t, dir, cut); len(hits) != 0 {
		t.Errorf("the cut-short create's env value is still stored after its start: %v", hits)
	}
	for _, id := range []string{sb.ID, short.ID} {
		c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil)
	}
}
