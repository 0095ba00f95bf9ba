# terraform test (Terraform 1.6+) / tofu test (OpenTofu 1.6+) for the
# module in the directory above. The provider block is left to the
# environment: RARECLOUD_API and RARECLOUD_TOKEN name the API (a local
# test backend, or RareCloud itself) and the token.
#
# These runs pass against the test backend in either mode: real (gVisor)
# or test mode, which creates and deletes sandboxes without running
# anything. execution.tftest.hcl needs code really executed.

variables {
  name = "nightly"
}

# Plan only: the inputs end up where they should, nothing is created.
run "plan_labels_and_lifetime" {
  command = plan

  assert {
    condition     = rarecloud_sandbox.workspace.template == "python"
    error_message = "The workspace should use the python template by default."
  }

  assert {
    condition     = rarecloud_sandbox.workspace.timeout_ms == 600000
    error_message = "10 minutes should be 600000 ms."
  }

  assert {
    condition     = rarecloud_sandbox.smoke_check.labels["ci-job"] == "nightly" && rarecloud_sandbox.smoke_check.labels["role"] == "smoke-check"
    error_message = "The smoke check should carry the job's labels."
  }
}

# A bad name is refused before anything is created.
run "refuses_a_bad_name" {
  command = plan

  variables {
    name = "Nightly Build"
  }

  expect_failures = [
    var.name,
  ]
}

# Apply: a real sandbox and a smoke check that runs to completion; the
# framework destroys both at the end of the file.
run "creates_and_checks" {
  assert {
    condition     = startswith(output.workspace_id, "sbx-")
    error_message = "The workspace id should be a sandbox id."
  }

  assert {
    condition     = rarecloud_sandbox.workspace.status == "running"
    error_message = "The workspace should be running."
  }

  assert {
    condition     = rarecloud_sandbox.smoke_check.status == "exited"
    error_message = "The smoke check should have run to completion."
  }

  assert {
    condition     = output.smoke_check_exit_code == 0
    error_message = "The smoke check should exit 0."
  }
}
