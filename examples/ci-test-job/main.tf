# A CI test job in one `terraform apply`: a Python sandbox, the application
# and its tests uploaded from ./src, a command that runs them, and the
# result read back. A failing test fails the apply; fix it and apply again,
# and the tests run again.
#
#   export RARECLOUD_TOKEN=rc_pat_...
#   terraform init && terraform apply
#   terraform destroy   # or let the sandbox expire at its timeout

variable "app_dir" {
  description = "Folder with the application and its tests (defaults to ./src next to this file)."
  type        = string
  default     = null
}

locals {
  app_dir = coalesce(var.app_dir, "${path.module}/src")
}

resource "rarecloud_sandbox" "ci" {
  template   = "python"
  timeout_ms = 1800000 # 30 minutes

  labels = {
    purpose = "ci-test-job"
  }
}

# One file resource per file of the folder, uploaded in parallel.
resource "rarecloud_sandbox_file" "app" {
  for_each = fileset(local.app_dir, "**")

  sandbox_id = rarecloud_sandbox.ci.id
  path       = "/home/user/app/${each.value}"
  source     = "${local.app_dir}/${each.value}"
}

# Runs the tests. Any change to an uploaded file runs them again. `-B`
# writes no bytecode cache: Python trusts a cached .pyc whose source has the
# same size and modification second, so a fix uploaded within a second of
# the last run could otherwise be ignored.
resource "rarecloud_sandbox_command" "tests" {
  sandbox_id           = rarecloud_sandbox.ci.id
  command              = "cd /home/user/app && python3 -B run_tests.py"
  timeout_ms           = 600000 # 10 minutes
  fail_on_nonzero_exit = true

  triggers = {
    for name, file in rarecloud_sandbox_file.app : name => file.sha256
  }
}

# The report the tests wrote, read after they have run.
data "rarecloud_sandbox_file" "report" {
  sandbox_id = rarecloud_sandbox.ci.id
  path       = "/home/user/report.json"

  depends_on = [rarecloud_sandbox_command.tests]
}

output "exit_code" {
  value = rarecloud_sandbox_command.tests.exit_code
}

output "report" {
  value = jsondecode(data.rarecloud_sandbox_file.report.content)
}

output "test_log" {
  value = rarecloud_sandbox_command.tests.stderr
}
