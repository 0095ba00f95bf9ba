//go:build tools

// Package tools pins the tools the build uses, so that `go run` resolves
// them from go.mod at a fixed version.
package tools

import (
	// Documentation generation.
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)
