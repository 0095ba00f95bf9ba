#!/usr/bin/env bash
# make generate: formats the examples and regenerates docs/ with tfplugindocs
# (the go:generate lines in main.go), then validates the result. It uses the
# Terraform CLI on PATH; nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v terraform >/dev/null || { echo "generate: terraform must be on PATH (no Terraform download is possible here)" >&2; exit 1; }
# tfplugindocs builds the provider and asks Terraform for its schema; a CLI
# config of our own keeps the machine's (possibly missing) one out of it.
cfg=$(mktemp)
trap 'rm -f "$cfg"' EXIT
export TF_CLI_CONFIG_FILE=$cfg
go generate ./...
go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs validate --provider-name rarecloud
