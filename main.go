// Command terraform-provider-rarecloud is the Terraform provider for
// RareCloud AI Sandboxes.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/provider"
)

// Run "go generate" to format the examples and generate the docs.
//go:generate terraform fmt -recursive ./examples/
//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-name rarecloud

// version is set by the release build (goreleaser: -X main.version=...).
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "start the provider with support for debuggers like delve")
	flag.Parse()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/rarecloudio/rarecloud",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
