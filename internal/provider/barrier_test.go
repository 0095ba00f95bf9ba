package provider

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupBeforeTheParallelBarrier: no test of this package calls the API
// (a client method that makes or changes a sandbox) before
// resource.ParallelTest. Such a
// call runs in the sequential phase, and whatever it makes waits there
// until every sequential test of the package has run: a sandbox with the
// default 5-minute lifetime expired so before its test resumed (404 on the
// first read). Such tests start with parallelAcc and call resource.Test.
func TestSetupBeforeTheParallelBarrier(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || !strings.HasPrefix(fd.Name.Name, "Test") {
				continue
			}
			checked++
			if !callsParallelTest(fd.Body) {
				continue
			}
			for _, stmt := range fd.Body.List {
				if callsParallelTest(stmt) {
					break
				}
				if call := apiCall(stmt); call != "" {
					t.Errorf("%s: %s calls %s before resource.ParallelTest: start it with parallelAcc(t) and use resource.Test",
						fset.Position(stmt.Pos()), fd.Name.Name, call)
					break
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d test functions found: the check looks at the wrong files", checked)
	}
}

func callsParallelTest(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "ParallelTest" {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "resource" {
				found = true
			}
		}
		return !found
	})
	return found
}

// apiCall names the first call in n of a client method that creates or
// changes a sandbox.
func apiCall(n ast.Node) string {
	name := ""
	ast.Inspect(n, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || name != "" {
			return name == ""
		}
		if fn, ok := call.Fun.(*ast.SelectorExpr); ok {
			switch fn.Sel.Name {
			case "CreateSandbox", "CreateSandboxWithKey", "RunCommand", "RunCode", "WriteFile", "UpdateSandbox":
				name = fn.Sel.Name
			}
		}
		return name == ""
	})
	return name
}
