// Package apispec holds the API's OpenAPI 3 description (openapi.yaml,
// the contract of the provider's client and of the backend alike) and
// checks answers against it: the test harness checks every answer a test
// gets, a backend started with ValidateResponses checks its own, and the
// client's contract tests hold its wire types to it.
package apispec

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Document is openapi.yaml.
//
//go:embed openapi.yaml
var Document []byte

var (
	specOnce   sync.Once
	specRouter routers.Router
	specDoc    *openapi3.T
	specErr    error
)

func loadSpec() (*openapi3.T, routers.Router, error) {
	specOnce.Do(func() {
		specDoc, specErr = openapi3.NewLoader().LoadFromData(Document)
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		// Any host: the backend listens on a random port.
		specDoc.Servers = openapi3.Servers{{URL: "/v1"}}
		specRouter, specErr = legacy.NewRouter(specDoc)
	})
	return specDoc, specRouter, specErr
}

// Validate checks an answer (status, headers, body) to req against
// openapi.yaml. An answer to a request the description has no route for
// must still be the error envelope.
func Validate(req *http.Request, status int, header http.Header, body []byte) error {
	doc, router, err := loadSpec()
	if err != nil {
		return fmt.Errorf("openapi.yaml: %w", err)
	}
	vreq := req.Clone(context.Background())
	vreq.URL = &url.URL{Path: req.URL.Path, RawQuery: req.URL.RawQuery}
	vreq.Host = ""
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		var v any
		if jerr := json.Unmarshal(body, &v); jerr != nil {
			return fmt.Errorf("not JSON: %w", jerr)
		}
		if verr := doc.Components.Schemas["ErrorEnvelope"].Value.VisitJSON(v); verr != nil {
			return fmt.Errorf("answer is not the error envelope: %w", verr)
		}
		return nil
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  status,
		Header:  header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	input.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		return fmt.Errorf("answer does not match openapi.yaml: %w", err)
	}
	return nil
}
