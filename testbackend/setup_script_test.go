package testbackend

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupRefusesOldTerraform runs the tool check of scripts/setup.sh with
// a stand-in terraform of each version on PATH: older than 1.11 (the
// acceptance tests of ephemeral resources and env_wo would skip) or
// unreadable is refused, 1.11 and newer pass.
func TestSetupRefusesOldTerraform(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "scripts", "setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for version, ok := range map[string]bool{
		"1.9.8": false, "1.10.5": false, "0.15.0": false, "garbage": false, "": false,
		"1.11.0": true, "1.11.4": true, "1.12.1": true, "2.0.0": true,
	} {
		bin := t.TempDir()
		fake := "#!/bin/sh\necho \"Terraform v" + version + "\"\necho on linux_amd64\n"
		if err := os.WriteFile(filepath.Join(bin, "terraform"), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
		// Only the function: setup itself installs things.
		cmd := exec.Command("bash", "-c", `source <(sed -n '/^check_tools()/,/^}/p' "$1"); log() { echo "ok: $*"; }; die() { echo "refused: $*"; exit 1; }; check_tools`, "check", script)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		switch {
		case ok && (err != nil || !strings.HasPrefix(string(out), "ok: ")):
			t.Errorf("Terraform %q refused: %v %s", version, err, out)
		case !ok && (err == nil || !strings.Contains(string(out), "refused: Terraform 1.11.0 or newer is needed")):
			t.Errorf("Terraform %q accepted: %v %s", version, err, out)
		}
	}
}
