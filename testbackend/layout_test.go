package testbackend

import (
	"io/fs"
	"os"
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
