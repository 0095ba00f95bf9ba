package testbackend

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSetupRefusesOldTerraform runs the tool check of scripts/setup.sh with
// a stand-in terraform of each version on PATH: older than 1.11 (the
// acceptance tests of ephemeral resources and env_wo would skip) or
// unreadable is refused, 1.11 and newer pass.
func TestSetupRefusesOldTerraform(t *testing.T) {
	script := setupScript(t)
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

// TestSetupWaitsForTheBackgroundOpenTofuBuild runs wait_tofu (what
// `setup.sh --wait-tofu` does before make test's OpenTofu pass) against a
// stand-in build: it returns once a running build has installed the CLI,
// fails with the end of the log when the build fails or is gone without
// an outcome, and starts a build when none runs.
func TestSetupWaitsForTheBackgroundOpenTofuBuild(t *testing.T) {
	script := setupScript(t)
	// The functions only, with their paths in a temporary directory; the
	// build is a stand-in that carries the marker argument, installs a
	// stand-in tofu and writes its outcome after a second.
	const harness = `set -euo pipefail
dir=$2
RC_TOFU=$dir/bin/tofu RC_TOFU_BUILD=$dir/build RC_TOFU_VERSION=1.12.6
mkdir -p "$dir/bin" "$RC_TOFU_BUILD"
log() { echo "log: $*"; }; die() { echo "die: $*"; exit 1; }; now_ms() { date +%s%3N; }
summary=()
source <(sed -n '/^tofu_ok()/,/^}/p; /^tofu_building()/,/^}/p; /^wait_tofu()/,/^}/p' "$1")
fake_build() { # $1: the outcome it writes, "" for none
	setsid bash -c 'echo $$ >"$2/pid"; echo "compiling…" >"$2/build.log"; sleep 1
		if [[ $1 == ok ]]; then printf "#!/bin/sh\necho OpenTofu v1.12.6\n" >"$3"; chmod +x "$3"; fi
		if [[ -n $1 ]]; then echo "$1" >"$2/status"; fi
		[[ $1 == ok ]] || echo "compile error: the end of the log" >>"$2/build.log"' rarecloud-tofu-build "$1" "$RC_TOFU_BUILD" "$RC_TOFU" &
	for i in $(seq 100); do [[ -s $RC_TOFU_BUILD/pid ]] && return; sleep 0.05; done
}
start_tofu() { echo "start_tofu called"; fake_build ok; }
`
	for _, tc := range []struct {
		name, setup string
		ok          bool
		want        string
	}{
		{"a running build installs the CLI", "fake_build ok", true, "log: tofu 1.12.6 built"},
		{"a running build fails", "fake_build failed", false, "compile error: the end of the log"},
		{"the build is gone without an outcome", "fake_build ''", false, "die: building OpenTofu 1.12.6 failed"},
		{"no build runs: one is started", "", true, "start_tofu called"},
		{"the CLI is there already", `printf '#!/bin/sh\necho OpenTofu v1.12.6\n' >"$RC_TOFU"; chmod +x "$RC_TOFU"`, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", "-c", harness+tc.setup+"\nwait_tofu\necho returned", "wait", script, t.TempDir())
			out, err := cmd.CombinedOutput()
			switch {
			case tc.ok && (err != nil || !strings.Contains(string(out), "returned")):
				t.Fatalf("wait_tofu failed: %v\n%s", err, out)
			case !tc.ok && (err == nil || strings.Contains(string(out), "returned")):
				t.Fatalf("wait_tofu returned although the build failed:\n%s", out)
			case !strings.Contains(string(out), tc.want):
				t.Fatalf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestSetupPlacesTheEgressAcceptAheadOfTheReject runs ensure_egress
// against a stand-in iptables holding INPUT as a list: with the accept for
// redirected DNS missing, or present but behind the bridge's reject (what
// a purge that left it behind and a later setup made: the backend then
// refuses egress control while setup said "egress ok"), it ends with one
// accept, ahead of the reject; with it ahead already, nothing changes.
func TestSetupPlacesTheEgressAcceptAheadOfTheReject(t *testing.T) {
	script := setupScript(t)
	const (
		dnsAccept = "-A INPUT -d 172.30.99.1/32 -i rcsbx0 -p udp -m udp --dport 53 -m comment --comment rarecloud-sandbox -j ACCEPT"
		reject    = "-A INPUT -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-port-unreachable"
		egress    = "-A INPUT -d 172.30.99.1/32 -m conntrack --ctstate DNAT --ctorigdst 172.30.99.1 -m comment --comment rarecloud-sandbox -j ACCEPT"
	)
	// The stand-in keeps INPUT in a file: -S prints it, -I INPUT 1 puts a
	// rule on top, -D INPUT removes the first equal rule (or fails).
	const fake = `#!/bin/bash
rules=$RULES
[[ $1 == -w ]] && shift
op=$1; shift
chain=$1; shift
[[ $op == -I ]] && shift # the position: always 1 here
spec="-A $chain $*"
spec=${spec//\/32 -m comment/ -m comment}
spec=${spec//--ctorigdst 172.30.99.1\/32/--ctorigdst 172.30.99.1}
case $op in
-S) echo "-P INPUT ACCEPT"; cat "$rules" ;;
-I) { echo "$spec"; cat "$rules"; } >"$rules.new" && mv "$rules.new" "$rules" ;;
-D) n=$(grep -nxF -- "$spec" "$rules" | head -1 | cut -d: -f1); [[ -n $n ]] || exit 1; sed -i "${n}d" "$rules" ;;
*) exit 2 ;;
esac
`
	for name, tc := range map[string]struct{ before, after []string }{
		"missing":           {[]string{dnsAccept, reject}, []string{egress, dnsAccept, reject}},
		"behind the reject": {[]string{dnsAccept, reject, egress}, []string{egress, dnsAccept, reject}},
		"ahead already":     {[]string{egress, dnsAccept, reject}, []string{egress, dnsAccept, reject}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "iptables"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "nft"), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			rules := filepath.Join(dir, "rules")
			if err := os.WriteFile(rules, []byte(strings.Join(tc.before, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			// Only the functions: setup itself changes the machine.
			cmd := exec.Command("bash", "-c", `source <(sed -n '/^ensure_egress()/,/^}/p; /^egress_accept_first()/,/^}/p' "$1")
RC_NET_GATEWAY=172.30.99.1 RC_NET_BRIDGE=rcsbx0 RC_FW_COMMENT=rarecloud-sandbox summary=()
log() { :; }; die() { echo "die: $*"; exit 1; }
ensure_egress; echo "${summary[*]}"`, "egress", script)
			cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "RULES="+rules)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("ensure_egress: %v\n%s", err, out)
			}
			got, err := os.ReadFile(rules)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Join(tc.after, "\n") + "\n"; string(got) != want {
				t.Fatalf("INPUT after ensure_egress (%s):\n%s\nwant:\n%s", strings.TrimSpace(string(out)), got, want)
			}
		})
	}
}

// TestSetupRuntimeYieldsOnStartsAndEnds runs the runtime script setup.sh
// writes, with stand-ins for runsc and the create wrapper that print their
// niceness and arguments: the calls that start and end sandboxes run 10
// nicer than the engine that called them, "exec" (a command without the
// agent) at the engine's own, and each passes its arguments through.
func TestSetupRuntimeYieldsOnStartsAndEnds(t *testing.T) {
	script := setupScript(t)
	dir := t.TempDir()
	const standIn = "#!/bin/sh\necho \"$(nice) $(basename \"$0\") $*\"\n"
	for _, name := range []string{"runsc", "rarecloud-runsc"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(standIn), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Only the function and its niceness: setup itself changes the machine.
	gen := exec.Command("bash", "-c", `source <(sed -n '/^RC_RUNTIME_NICE=/p; /^RC_RUNSC_FLAGS=/p; /^runtime_script()/,/^}/p' "$1")
RC_RUNSC=$2/runsc RC_RUNSC_CREATE=$2/rarecloud-runsc runtime_script`, "runtime", script, dir)
	text, err := gen.CombinedOutput()
	if err != nil {
		t.Fatalf("runtime_script: %v\n%s", err, text)
	}
	runtime := filepath.Join(dir, "rarecloud-runtime")
	if err := os.WriteFile(runtime, text, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nice").Output()
	if err != nil {
		t.Fatal(err)
	}
	base, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	nicer := min(base+10, 19)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", "/r", "create", "--bundle", "/b", "c1"}, fmt.Sprintf("%d rarecloud-runsc --root /r create --bundle /b c1", nicer)},
		{[]string{"--root", "/r", "start", "c1"}, fmt.Sprintf("%d runsc --platform=systrap --systrap-disable-fast-path --root /r start c1", nicer)},
		{[]string{"--root", "/r", "kill", "c1", "9"}, fmt.Sprintf("%d runsc --platform=systrap --systrap-disable-fast-path --root /r kill c1 9", nicer)},
		{[]string{"--root", "/r", "delete", "--force", "c1"}, fmt.Sprintf("%d runsc --platform=systrap --systrap-disable-fast-path --root /r delete --force c1", nicer)},
		{[]string{"--root", "/r", "exec", "--process", "/p.json", "c1"}, fmt.Sprintf("%d runsc --platform=systrap --systrap-disable-fast-path --root /r exec --process /p.json c1", base)},
	} {
		got, err := exec.Command(runtime, tc.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, got)
		}
		if strings.TrimSpace(string(got)) != tc.want {
			t.Errorf("%v ran as %q, want %q", tc.args, strings.TrimSpace(string(got)), tc.want)
		}
	}
}

// TestWrapperRunsRunscWithSetupsFlags: the create wrapper
// (cmd/rarecloud-runsc) runs runsc with the flags setup's runtime script
// gives every other call, so that a sandbox's sentry, started by create,
// runs as the rest of its calls assume.
func TestWrapperRunsRunscWithSetupsFlags(t *testing.T) {
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "rarecloud-runsc")
	if out, err := exec.Command("go", "build", "-o", wrapper, "./cmd/rarecloud-runsc").CombinedOutput(); err != nil {
		t.Fatalf("building the wrapper: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "runsc"), []byte("#!/bin/sh\necho \"$*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	flags, err := exec.Command("bash", "-c", `source <(sed -n '/^RC_RUNSC_FLAGS=/p' "$1"); echo "$RC_RUNSC_FLAGS"`, "flags", setupScript(t)).Output()
	if err != nil || !strings.Contains(string(flags), "--systrap-disable-fast-path") {
		t.Fatalf("setup's RC_RUNSC_FLAGS: %q, %v", flags, err)
	}
	got, err := exec.Command(wrapper, "--root", "/r", "start", "c1").CombinedOutput()
	if err != nil {
		t.Fatalf("the wrapper: %v\n%s", err, got)
	}
	if want := strings.TrimSpace(string(flags)) + " --root /r start c1"; strings.TrimSpace(string(got)) != want {
		t.Fatalf("the wrapper ran runsc %q, want %q", strings.TrimSpace(string(got)), want)
	}
}

// setupScript is the absolute path of scripts/setup.sh, whose functions
// these tests run alone.
func setupScript(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "scripts", "setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	return script
}
