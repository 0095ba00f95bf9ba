package testbackend

// Checks of the whole tree rather than of the composition root's code:
// they live in the root package because its directory is the tree's top
// (README.md, every package below it).

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayoutNamesEveryPackage: README.md's layout table names every Go
// package under testbackend/ by its path relative to it ("api/",
// "cmd/rarecloud-bench/"), so a new package cannot land without a word
// on its job.
func TestLayoutNamesEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	if i := strings.Index(table, "\n## "); i >= 0 {
		table = table[:i]
	}
	seen := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "results") {
			return filepath.SkipDir
		}
		goFiles, _ := filepath.Glob(filepath.Join(path, "*.go"))
		if len(goFiles) == 0 {
			return nil
		}
		seen++
		name := "`" + filepath.ToSlash(path) + "/`"
		if path == "." {
			name = "`./`"
		}
		if !strings.Contains(table, "| "+name+" ") {
			t.Errorf("README.md's layout table does not name the package %s", name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("found only %d packages: the walk is wrong", seen)
	}
}

// TestRuntimeSeamLinksNoEngine: the lifecycle, the API, the test mode and
// the runtime interface link no engine code, neither Docker's client nor
// netlink nor the packages that use them (container/docker,
// container/netwire), so a second runtime is one new package beside
// container/docker and nothing of the lifecycle changes.
func TestRuntimeSeamLinksNoEngine(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	const module = "github.com/RareCloudio/terraform-provider-rarecloud"
	forbidden := []string{
		"github.com/docker/", "github.com/moby/", "github.com/containerd/",
		"github.com/vishvananda/netlink", "github.com/vishvananda/netns",
		module + "/testbackend/container/docker", module + "/testbackend/container/netwire",
	}
	for _, pkg := range []string{"./container", "./sandbox", "./api", "./testmode", "./testmode/takeover"} {
		out, err := exec.Command(gocmd, "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 2 {
			t.Fatalf("go list -deps %s listed %q: the listing is wrong", pkg, deps)
		}
		for _, dep := range deps {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(dep, f+"/")) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

// TestNoFixedPathUnderTmp: no script and no non-test Go file of the
// backend names a fixed path under /tmp (a PID is no secret either):
// another local user can create it first, as a link to a file of root's
// that the script then writes through. Temporary files come from mktemp
// (scripts) or os.MkdirTemp / t.TempDir (Go), under $TMPDIR.
func TestNoFixedPathUnderTmp(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../scripts/*.sh", "../GNUmakefile", "images/*.sh", "*/*.go", "*/*/*.go", "*.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d files to check: %v", len(files), files)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "/tmp/") && !strings.Contains(line, "mktemp") && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d names a fixed path under /tmp: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
