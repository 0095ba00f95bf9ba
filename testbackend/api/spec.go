package api

import _ "embed"

// OpenAPI is the API's OpenAPI 3 description; tests validate every
// response against it.
//
//go:embed openapi.yaml
var OpenAPI []byte
