// Command terraform-provider-rarecloud is the Terraform provider for
// RareCloud AI Sandboxes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"runtime/debug"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/provider"
)

// Run "go generate" to format the examples and generate the docs.
//go:generate terraform fmt -recursive ./examples/
//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-name rarecloud

// version is set by the release build (goreleaser: -X main.version=...,
// 0.4.0 for the tag v0.4.0). Other builds report "dev", or the module
// version when installed with `go install ...@v0.4.0`.
var version = "dev"

func main() {
	var debugMode, printVersion bool
	flag.BoolVar(&debugMode, "debug", false, "start the provider with support for debuggers like delve")
	flag.BoolVar(&printVersion, "version", false, "print the provider's version and exit")
	flag.Parse()

	info, ok := debug.ReadBuildInfo()
	v := resolveVersion(version, info, ok)
	if printVersion {
		fmt.Printf("terraform-provider-rarecloud %s\n", v)
		return
	}

	err := providerserver.Serve(context.Background(), provider.New(v), providerserver.ServeOpts{
		Address: "registry.terraform.io/rarecloudio/rarecloud",
		Debug:   debugMode,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}

// resolveVersion is the version the provider reports (in its metadata and
// the User-Agent of its API requests): the one the release build set, else
// the module version `go install` recorded, else "dev".
func resolveVersion(linked string, info *debug.BuildInfo, ok bool) string {
	if linked != "" && linked != "dev" {
		return linked
	}
	if ok && info != nil {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return strings.TrimPrefix(v, "v")
		}
	}
	return "dev"
}
