package client

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/apispec"
)

// The client's wire types are its own, written apart from the backend's:
// that independence is what lets a contract break show. These tests keep
// them honest against the API's description, testbackend/apispec/openapi.yaml.
// A field the spec adds is no break; a field the client reads or sends
// that the spec does not know, a type that disagrees, a required request
// field the client cannot send, or an error code the API never answers
// with, is.

const specPath = "openapi.yaml (package apispec)"

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(apispec.Document)
	if err != nil {
		t.Fatalf("%s: %v", specPath, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s: %v", specPath, err)
	}
	return doc
}

// direction says which way a wire type travels.
type direction int

const (
	fromAPI direction = iota // decoded from the API's answers
	toAPI                    // encoded into request bodies
)

// wireType is one of the client's wire types and the schema it must fit.
type wireType struct {
	name   string // the Go type's name, as declared in the package
	value  any
	dir    direction
	schema func(*testing.T, *openapi3.T) *openapi3.Schema
	// unused are required answer properties the client does not read,
	// each with the reason.
	unused map[string]string
}

// wireTypes is the contract: every type of the package with json tags is
// here (TestEveryWireTypeIsInTheContract), with the schema of what it
// travels as.
func wireTypes() []wireType {
	return []wireType{
		{name: "Template", value: Template{}, dir: fromAPI, schema: component("Template")},
		{name: "Sandbox", value: Sandbox{}, dir: fromAPI, schema: component("Sandbox")},
		{name: "Sandbox", value: Sandbox{}, dir: fromAPI, schema: answerData(http.MethodGet, "/sandboxes/{id}", 200)},
		{name: "Sandbox", value: Sandbox{}, dir: fromAPI, schema: answerData(http.MethodPost, "/sandboxes", 201)},
		{name: "Sandbox", value: Sandbox{}, dir: fromAPI, schema: items(answerData(http.MethodGet, "/sandboxes", 200))},
		{name: "Template", value: Template{}, dir: fromAPI, schema: items(answerData(http.MethodGet, "/sandboxes/templates", 200))},
		{name: "CreateSandboxRequest", value: CreateSandboxRequest{}, dir: toAPI, schema: requestBody(http.MethodPost, "/sandboxes")},
		{name: "UpdateSandboxRequest", value: UpdateSandboxRequest{}, dir: toAPI, schema: requestBody(http.MethodPatch, "/sandboxes/{id}")},
		{name: "DeleteResult", value: DeleteResult{}, dir: fromAPI, schema: answerData(http.MethodDelete, "/sandboxes/{id}", 200)},
		{name: "RunCodeRequest", value: RunCodeRequest{}, dir: toAPI, schema: requestBody(http.MethodPost, "/sandboxes/{id}/run_code")},
		{name: "CommandRequest", value: CommandRequest{}, dir: toAPI, schema: requestBody(http.MethodPost, "/sandboxes/{id}/commands")},
		{name: "ExecResult", value: ExecResult{}, dir: fromAPI, schema: component("ExecResult")},
		{name: "ExecResult", value: ExecResult{}, dir: fromAPI, schema: answerData(http.MethodPost, "/sandboxes/{id}/run_code", 200)},
		{name: "ExecResult", value: ExecResult{}, dir: fromAPI, schema: answerData(http.MethodPost, "/sandboxes/{id}/commands", 200)},
		{name: "File", value: File{}, dir: toAPI, schema: requestBody(http.MethodPut, "/sandboxes/{id}/files")},
		{name: "File", value: File{}, dir: fromAPI, schema: answerData(http.MethodGet, "/sandboxes/{id}/files", 200)},
		{name: "FileWritten", value: FileWritten{}, dir: fromAPI, schema: answerData(http.MethodPut, "/sandboxes/{id}/files", 200)},
		{name: "logsAnswer", value: logsAnswer{}, dir: fromAPI, schema: answerData(http.MethodGet, "/sandboxes/{id}/logs", 200)},
		{name: "envelope", value: envelope{}, dir: fromAPI, schema: envelopeSchema,
			unused: map[string]string{"error": "required only in the error envelope; the client reads ok first"}},
	}
}

// TestWireTypesMatchTheSpec: every json field of every wire type is a
// property of its schema, of a type that decodes (or encodes) as the
// schema says; an answer's required properties are read; a request's
// required properties are declared and never left out.
func TestWireTypesMatchTheSpec(t *testing.T) {
	doc := loadSpec(t)
	reported := map[string]bool{} // a type used in several places fails once
	for _, w := range wireTypes() {
		s := w.schema(t, doc)
		for _, p := range checkWire(reflect.TypeOf(w.value), s, w.dir, w.unused) {
			if msg := fmt.Sprintf("client.%s: %s", w.name, p); !reported[msg] {
				reported[msg] = true
				t.Error(msg)
			}
		}
	}
}

// TestEveryWireTypeIsInTheContract: a new wire type cannot escape the
// contract test.
func TestEveryWireTypeIsInTheContract(t *testing.T) {
	covered := map[string]bool{}
	for _, w := range wireTypes() {
		covered[w.name] = true
	}
	for _, name := range parsePackage(t).wireTypes {
		if !covered[name] {
			t.Errorf("client.%s has json tags but is not in wireTypes(): add it with the schema it travels as", name)
		}
	}
}

// TestErrorCodesAreTheAPIs: every error code the client names is one the
// API documents, under the status the client expects.
func TestErrorCodesAreTheAPIs(t *testing.T) {
	codes := apiErrorCodes(t, loadSpec(t))
	consts := parsePackage(t).consts
	n := 0
	for name, value := range consts {
		if !strings.HasPrefix(name, "Code") {
			continue
		}
		n++
		if _, ok := codes[value]; !ok {
			t.Errorf("client.%s = %q: the API has no such error code (openapi.yaml components/responses/Error)", name, value)
		}
	}
	if n < 10 {
		t.Fatalf("found %d Code constants in the package: the parse went wrong", n)
	}
	// The statuses the client's own logic relies on.
	for code, status := range map[string]int{
		CodeNotFound: 404, CodeFileNotFound: 404, CodeUnauthorized: 401, CodeInsufficientScope: 403,
		CodeSandboxNotReady: 409, CodeSandboxNotRunning: 409, CodeIdempotencyInProgress: 409,
		CodeTooManyRequests: 429, CodeServiceUnavailable: 503,
	} {
		if got := codes[code]; got != status {
			t.Errorf("%s: the API answers it with HTTP %d, the client expects %d", code, got, status)
		}
	}
}

// TestStatusesAreTheAPIs: the sandbox statuses the client names are the
// values of the Sandbox schema's status enum.
func TestStatusesAreTheAPIs(t *testing.T) {
	doc := loadSpec(t)
	status := component("Sandbox")(t, doc).Properties["status"].Value
	n := 0
	for name, value := range parsePackage(t).consts {
		if !strings.HasPrefix(name, "Status") {
			continue
		}
		n++
		if !slices.Contains(status.Enum, any(value)) {
			t.Errorf("client.%s = %q: not in the Sandbox status enum %v", name, value, status.Enum)
		}
	}
	if n != len(status.Enum) {
		t.Errorf("the client names %d statuses, the API has %d: %v", n, len(status.Enum), status.Enum)
	}
}

// TestContractCatchesDrift proves the checks can fail: a field the spec
// lacks, a type that disagrees, a missing nullable, a required request
// field left out, and an unread required answer field are each caught.
func TestContractCatchesDrift(t *testing.T) {
	doc := loadSpec(t)
	sandbox := component("Sandbox")(t, doc)
	exec := component("ExecResult")(t, doc)
	cmd := requestBody(http.MethodPost, "/sandboxes/{id}/commands")(t, doc)
	for _, tc := range []struct {
		name   string
		value  any
		schema *openapi3.Schema
		dir    direction
		want   string
	}{
		{"bogus tag", struct {
			Sandbox
			Bogus string `json:"bogusField"`
		}{}, sandbox, fromAPI, `"bogusField": not in the schema`},
		{"wrong type", struct {
			ExecResult
			DurationMs string `json:"durationMs"`
		}{}, exec, fromAPI, `"durationMs": Go string`},
		{"null into a non-pointer", struct {
			ExecResult
			ExitCode int64 `json:"exitCode"`
		}{}, exec, fromAPI, `"exitCode": the API may send null`},
		{"required field omitempty", struct {
			Cmd string `json:"cmd,omitempty"`
		}{}, cmd, toAPI, `required property "cmd" is omitempty`},
		{"required field missing", struct {
			TimeoutMs int64 `json:"timeoutMs,omitempty"`
		}{}, cmd, toAPI, `required property "cmd" is not declared`},
		{"required answer field unread", struct {
			ID string `json:"id"`
		}{}, sandbox, fromAPI, `required property "status" is not read`},
	} {
		probs := checkWire(reflect.TypeOf(tc.value), tc.schema, tc.dir, nil)
		if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
			t.Errorf("%s: want a problem containing %q, got %q", tc.name, tc.want, probs)
		}
	}
	codes := apiErrorCodes(t, doc)
	if _, ok := codes["RATE_LIMITED"]; ok {
		t.Error("RATE_LIMITED counted as an API code: the code list is wrong")
	}
}

// TestTooManyRequestsIsTheAPIsCode: a 429 with the API's own code is
// retried, and the error after the last try carries the code the client
// names.
func TestTooManyRequestsIsTheAPIsCode(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", "0")
		writeJSON(w, http.StatusTooManyRequests, errBody("TOO_MANY_REQUESTS", "too many concurrent requests"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{MaxRetries: 2})
	_, err := c.ListTemplates(context.Background())
	if !HasCode(err, CodeTooManyRequests) || n.Load() != 3 {
		t.Fatalf("after %d attempts: err = %v, want TOO_MANY_REQUESTS after 3", n.Load(), err)
	}
}

// checkWire lists the ways t disagrees with schema s.
func checkWire(t reflect.Type, s *openapi3.Schema, dir direction, unused map[string]string) []string {
	var probs []string
	props, required := properties(s)
	declared := map[string]bool{}
	for _, f := range jsonFields(t) {
		declared[f.name] = true
		ps, ok := props[f.name]
		if !ok {
			probs = append(probs, fmt.Sprintf("%q: not in the schema (its properties: %s)", f.name, strings.Join(sortedKeys(props), ", ")))
			continue
		}
		for _, p := range compatible(f.typ, ps, dir) {
			probs = append(probs, fmt.Sprintf("%q: %s", f.name, p))
		}
		if dir == toAPI && f.omitempty && slices.Contains(required, f.name) {
			probs = append(probs, fmt.Sprintf("required property %q is omitempty: a zero value leaves it out", f.name))
		}
	}
	for _, r := range required {
		if declared[r] {
			continue
		}
		switch {
		case dir == toAPI:
			probs = append(probs, fmt.Sprintf("required property %q is not declared: the request is invalid without it", r))
		case unused[r] == "":
			probs = append(probs, fmt.Sprintf("required property %q is not read (list it in unused, with the reason, if the client needs not)", r))
		}
	}
	return probs
}

// compatible lists why Go type t does not travel as schema s.
func compatible(t reflect.Type, s *openapi3.Schema, dir direction) []string {
	if t == reflect.TypeFor[json.RawMessage]() {
		return nil // anything
	}
	if s.Nullable && dir == fromAPI {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		default:
			return []string{fmt.Sprintf("the API may send null, Go %s cannot tell it from zero (use a pointer)", t)}
		}
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	want := schemaType(s)
	var got []string
	switch t.Kind() {
	case reflect.String:
		got = []string{"string"}
	case reflect.Bool:
		got = []string{"boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		got = []string{"integer"}
	case reflect.Float32, reflect.Float64:
		got = []string{"number", "integer"} // a float reads (and writes) both
		if dir == toAPI {
			got = []string{"number"}
		}
	case reflect.Slice, reflect.Array:
		if want != "array" {
			return []string{fmt.Sprintf("Go %s, the schema says %s", t, want)}
		}
		if s.Items == nil {
			return nil
		}
		return compatible(t.Elem(), s.Items.Value, dir)
	case reflect.Map:
		if want != "object" {
			return []string{fmt.Sprintf("Go %s, the schema says %s", t, want)}
		}
		if ap := s.AdditionalProperties.Schema; ap != nil {
			return compatible(t.Elem(), ap.Value, dir)
		}
		return nil
	case reflect.Struct:
		if want != "object" {
			return []string{fmt.Sprintf("Go %s, the schema says %s", t, want)}
		}
		return checkWire(t, s, dir, nil)
	default:
		return []string{fmt.Sprintf("Go %s has no JSON schema type this test knows", t)}
	}
	if want == "" || slices.Contains(got, want) {
		return nil
	}
	return []string{fmt.Sprintf("Go %s, the schema says %s", t, want)}
}

// schemaType is s's type, looking through allOf.
func schemaType(s *openapi3.Schema) string {
	if s.Type != nil && len(s.Type.Slice()) == 1 {
		return s.Type.Slice()[0]
	}
	for _, a := range s.AllOf {
		if typ := schemaType(a.Value); typ != "" {
			return typ
		}
	}
	if len(s.Properties) > 0 {
		return "object"
	}
	return ""
}

// properties are s's properties and required names, merged over allOf.
func properties(s *openapi3.Schema) (map[string]*openapi3.Schema, []string) {
	props := map[string]*openapi3.Schema{}
	required := slices.Clone(s.Required)
	for name, p := range s.Properties {
		props[name] = p.Value
	}
	for _, a := range s.AllOf {
		ps, req := properties(a.Value)
		for name, p := range ps {
			props[name] = p
		}
		required = append(required, req...)
	}
	return props, required
}

type jsonField struct {
	name      string
	typ       reflect.Type
	omitempty bool
}

// jsonFields are the fields encoding/json sees, embedded structs
// flattened (an outer field shadows an embedded one of the same name).
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	seen := map[string]bool{}
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			embedded = append(embedded, f.Type)
			continue
		}
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		seen[name] = true
		out = append(out, jsonField{name: name, typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	for _, e := range embedded {
		for _, f := range jsonFields(e) {
			if !seen[f.name] {
				out = append(out, f)
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// component is a schema of components/schemas.
func component(name string) func(*testing.T, *openapi3.T) *openapi3.Schema {
	return func(t *testing.T, doc *openapi3.T) *openapi3.Schema {
		t.Helper()
		ref := doc.Components.Schemas[name]
		if ref == nil || ref.Value == nil {
			t.Fatalf("openapi.yaml: no schema %s", name)
		}
		return ref.Value
	}
}

func operation(t *testing.T, doc *openapi3.T, method, path string) *openapi3.Operation {
	t.Helper()
	item := doc.Paths.Find(path)
	if item == nil || item.GetOperation(method) == nil {
		t.Fatalf("openapi.yaml: no %s %s", method, path)
	}
	return item.GetOperation(method)
}

// answerData is the schema of the data of an answer's envelope.
func answerData(method, path string, status int) func(*testing.T, *openapi3.T) *openapi3.Schema {
	return func(t *testing.T, doc *openapi3.T) *openapi3.Schema {
		t.Helper()
		r := operation(t, doc, method, path).Responses.Status(status)
		if r == nil || r.Value == nil || r.Value.Content.Get("application/json") == nil {
			t.Fatalf("openapi.yaml: %s %s has no JSON %d answer", method, path, status)
		}
		props, _ := properties(r.Value.Content.Get("application/json").Schema.Value)
		if props["data"] == nil {
			t.Fatalf("openapi.yaml: the %d answer of %s %s has no data", status, method, path)
		}
		return props["data"]
	}
}

// requestBody is the schema of a request's JSON body.
func requestBody(method, path string) func(*testing.T, *openapi3.T) *openapi3.Schema {
	return func(t *testing.T, doc *openapi3.T) *openapi3.Schema {
		t.Helper()
		b := operation(t, doc, method, path).RequestBody
		if b == nil || b.Value == nil || b.Value.Content.Get("application/json") == nil {
			t.Fatalf("openapi.yaml: %s %s has no JSON body", method, path)
		}
		return b.Value.Content.Get("application/json").Schema.Value
	}
}

// items is the item schema of an array schema.
func items(of func(*testing.T, *openapi3.T) *openapi3.Schema) func(*testing.T, *openapi3.T) *openapi3.Schema {
	return func(t *testing.T, doc *openapi3.T) *openapi3.Schema {
		t.Helper()
		s := of(t, doc)
		if s.Items == nil {
			t.Fatal("openapi.yaml: not an array")
		}
		return s.Items.Value
	}
}

// envelopeSchema is what every answer may be: the success envelope (OK
// and its data) or the error envelope.
func envelopeSchema(t *testing.T, doc *openapi3.T) *openapi3.Schema {
	t.Helper()
	okEnv := component("SandboxEnvelope")(t, doc)
	errEnv := component("ErrorEnvelope")(t, doc)
	merged := &openapi3.Schema{Type: &openapi3.Types{"object"}, Properties: openapi3.Schemas{}}
	okProps, okReq := properties(okEnv)
	errProps, errReq := properties(errEnv)
	for name, p := range okProps {
		merged.Properties[name] = openapi3.NewSchemaRef("", p)
	}
	for name, p := range errProps {
		merged.Properties[name] = openapi3.NewSchemaRef("", p)
	}
	// data is any answer's: the client keeps it raw.
	merged.Properties["data"] = openapi3.NewSchemaRef("", &openapi3.Schema{})
	merged.Required = append(okReq, errReq...)
	return merged
}

// apiErrorCodes are the error codes openapi.yaml documents (the
// description of components/responses/Error: "400 INVALID_JSON, …; 401
// UNAUTHORIZED; …"), each with its HTTP status.
func apiErrorCodes(t *testing.T, doc *openapi3.T) map[string]int {
	t.Helper()
	r := doc.Components.Responses["Error"]
	if r == nil || r.Value == nil || r.Value.Description == nil {
		t.Fatal("openapi.yaml: no components/responses/Error description")
	}
	// Parentheses explain (ALLOW_ALL there is an egress mode, not a code).
	desc := regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(*r.Value.Description, "")
	codes := map[string]int{}
	status := 0
	for _, tok := range regexp.MustCompile(`\b(\d{3}|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]{4,})\b`).FindAllString(desc, -1) {
		if n, err := strconv.Atoi(tok); err == nil {
			status = n
			continue
		}
		if status != 0 {
			codes[tok] = status
		}
	}
	if len(codes) < 20 {
		t.Fatalf("openapi.yaml: only %d error codes found in components/responses/Error", len(codes))
	}
	return codes
}

// parsed is what the package's source declares.
type parsed struct {
	consts    map[string]string // string constants by name
	wireTypes []string          // struct types with a json tag
	senders   []string          // exported methods that call c.do
}

// parsePackage reads the package's non-test source.
func parsePackage(t *testing.T) parsed {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := parsed{consts: map[string]string{}}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok {
				if fd.Recv != nil && fd.Name.IsExported() && callsDo(fd) {
					out.senders = append(out.senders, fd.Name.Name)
				}
				continue
			}
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					if gd.Tok != token.CONST {
						continue
					}
					for i, id := range s.Names {
						if i < len(s.Values) {
							if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								v, _ := strconv.Unquote(lit.Value)
								out.consts[id.Name] = v
							}
						}
					}
				case *ast.TypeSpec:
					if st, ok := s.Type.(*ast.StructType); ok && hasJSONTag(st) {
						out.wireTypes = append(out.wireTypes, s.Name.Name)
					}
				}
			}
		}
	}
	return out
}

// callsDo reports whether a method's body calls its receiver's do.
func callsDo(fd *ast.FuncDecl) bool {
	found := false
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "do" {
				found = true
			}
		}
		return !found
	})
	return found
}

func hasJSONTag(st *ast.StructType) bool {
	found := false
	ast.Inspect(st, func(n ast.Node) bool {
		if f, ok := n.(*ast.Field); ok && f.Tag != nil && strings.Contains(f.Tag.Value, `json:"`) {
			found = true
		}
		return !found
	})
	return found
}
