// Command testsummary reads `go test -json` on stdin, prints the tests'
// output as go test would, and ends with how many tests ran: any test that
// failed or skipped, or any package that failed to build, fails the run.
// Its last line is "N passed, M failed" (skips count as failures).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

type event struct {
	Action  string `json:"Action"`
	Package string `json:"Package"`
	Test    string `json:"Test"`
	Output  string `json:"Output"`
}

func main() {
	passed, failed := 0, 0
	var skipped, failures []string
	pkgFailedTests := map[string]int{}
	var brokenPkgs []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// go test's own messages (a build error) come as plain text.
			fmt.Println(sc.Text())
			continue
		}
		if e.Output != "" {
			fmt.Print(e.Output)
		}
		switch {
		case e.Test == "" && e.Action == "fail" && pkgFailedTests[e.Package] == 0:
			brokenPkgs = append(brokenPkgs, e.Package)
		case e.Test == "":
		case e.Action == "pass":
			passed++
		case e.Action == "fail":
			failed++
			pkgFailedTests[e.Package]++
			failures = append(failures, e.Package+" "+e.Test)
		case e.Action == "skip":
			skipped = append(skipped, e.Package+" "+e.Test)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	sort.Strings(skipped)
	for _, s := range failures {
		fmt.Println("FAILED:", s)
	}
	for _, p := range brokenPkgs {
		fmt.Println("FAILED (package did not build or its TestMain failed):", p)
	}
	for _, s := range skipped {
		fmt.Println("SKIPPED (a skip fails the run: make test must run every test):", s)
	}
	bad := failed + len(skipped) + len(brokenPkgs)
	fmt.Printf("%d passed, %d failed\n", passed, bad)
	if bad > 0 {
		os.Exit(1)
	}
}
