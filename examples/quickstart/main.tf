# Quickstart: a Python sandbox to run code in, and a run-mode job whose
# exit code and output Terraform reports.
#
#   export RARECLOUD_TOKEN=rc_pat_...
#   terraform init && terraform apply
#
# scripts/demo.sh runs this against the local test backend.

terraform {
  required_providers {
    rarecloud = {
      source  = "rarecloudio/rarecloud"
      version = "~> 0.4"
    }
  }
}

provider "rarecloud" {
  default_labels = {
    example = "quickstart"
  }
}

# A sandbox that waits for code: run it with a rarecloud_sandbox_command
# resource, or with curl against the API (POST .../sandboxes/<id>/run_code).
resource "rarecloud_sandbox" "dev" {
  template   = "python"
  timeout_ms = 600000 # 10 minutes
}

# A job: the program runs to completion; the apply waits for its exit code.
resource "rarecloud_sandbox" "job" {
  template      = "python"
  command       = ["python3", "-c", var.job_code]
  wait_for_exit = true
  timeout_ms    = 300000

  labels = {
    role = "job"
  }
}

data "rarecloud_sandbox_logs" "job" {
  sandbox_id = rarecloud_sandbox.job.id
}

variable "job_code" {
  description = "Python code the job runs."
  type        = string
  default     = "import platform, sys; print('hello from Python', platform.python_version()); print('sum of 1..100 =', sum(range(101))); sys.exit(0)"
}

output "sandbox_id" {
  description = "Run code in it: a rarecloud_sandbox_command resource with this sandbox_id, or curl against the API: POST $RARECLOUD_API/sandboxes/<id>/run_code with the bearer token RARECLOUD_TOKEN (README: Try it locally)"
  value       = rarecloud_sandbox.dev.id
}

output "sandbox_expires_at" {
  value = rarecloud_sandbox.dev.expires_at
}

output "job_id" {
  value = rarecloud_sandbox.job.id
}

output "job_exit_code" {
  value = rarecloud_sandbox.job.exit_code
}

output "job_logs" {
  value = data.rarecloud_sandbox_logs.job.logs
}
