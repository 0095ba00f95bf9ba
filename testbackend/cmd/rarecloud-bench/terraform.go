package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// terraformRows applies and destroys ten sandboxes with the provider
// built from this tree, through a dev_overrides CLI config of its own.
func terraformRows(ctx context.Context, b *backend, work string) (*row, *row, error) {
	if _, err := exec.LookPath("terraform"); err != nil {
		return nil, nil, errors.New("terraform is not on PATH")
	}
	pdir := filepath.Join(work, "provider")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(pdir, "terraform-provider-rarecloud"), ".").CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("build provider: %v\n%s", err, out)
	}
	cfg := filepath.Join(work, "terraformrc")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"rarecloudio/rarecloud\" = %q\n  }\n  direct {}\n}\n", pdir)), 0o644); err != nil {
		return nil, nil, err
	}
	tf := filepath.Join(work, "tf")
	if err := os.MkdirAll(tf, 0o755); err != nil {
		return nil, nil, err
	}
	main := fmt.Sprintf(`terraform {
  required_providers {
    rarecloud = { source = "rarecloudio/rarecloud" }
  }
}

provider "rarecloud" {
  api   = %q
  token = %q
}

resource "rarecloud_sandbox" "bench" {
  count      = 10
  template   = "base"
  timeout_ms = 600000
}
`, b.url, token)
	if err := os.WriteFile(filepath.Join(tf, "main.tf"), []byte(main), 0o644); err != nil {
		return nil, nil, err
	}
	runTF := func(args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, "terraform", args...)
		cmd.Dir = tf
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cfg, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("terraform %s: %v\n%s", args[0], err, out)
		}
		return time.Since(t0), nil
	}
	apply, err := runTF("apply", "-auto-approve", "-input=false", "-parallelism=10", "-no-color")
	if err != nil {
		return nil, nil, err
	}
	destroy, err := runTF("destroy", "-auto-approve", "-input=false", "-parallelism=10", "-no-color")
	if err != nil {
		return nil, nil, err
	}
	return summarize("terraform apply, 10 sandboxes (wall)", []time.Duration{apply}, 0),
		summarize("terraform destroy, 10 sandboxes (wall)", []time.Duration{destroy}, 0), nil
}
