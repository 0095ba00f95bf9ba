# A small module to test with `terraform test` (Terraform 1.6+) or
# `tofu test` (OpenTofu 1.6+): a sandbox for a CI job, and a run-mode
# smoke check whose exit code the module reports. tests/ci.tftest.hcl
# tests it against RareCloud or a local test backend (see the guide
# "Test your module against a local RareCloud").

terraform {
  required_version = ">= 1.6.0"

  required_providers {
    rarecloud = {
      source  = "rarecloudio/rarecloud"
      version = "~> 0.4"
    }
  }
}

variable "name" {
  description = "Name of the CI job: labels every sandbox of this module."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,39}$", var.name))
    error_message = "The name must be 1-40 lowercase letters, digits and dashes, starting with a letter."
  }
}

variable "template" {
  description = "Sandbox template: base, python or node."
  type        = string
  default     = "python"

  validation {
    condition     = contains(["base", "python", "node"], var.template)
    error_message = "The template must be base, python or node."
  }
}

variable "smoke_check" {
  description = "Command the smoke check runs to completion (exec form)."
  type        = list(string)
  default     = ["python3", "-c", "import sys; print('python', sys.version_info[0]); sys.exit(0)"]
}

variable "lifetime_minutes" {
  description = "How long the CI sandbox lives."
  type        = number
  default     = 10
}

locals {
  labels = {
    ci-job = var.name
  }
}

# The sandbox the job runs its code in (through the API or the CLI).
resource "rarecloud_sandbox" "workspace" {
  template   = var.template
  timeout_ms = var.lifetime_minutes * 60 * 1000
  labels     = merge(local.labels, { role = "workspace" })
}

# The smoke check: runs to completion while the apply waits.
resource "rarecloud_sandbox" "smoke_check" {
  template      = var.template
  command       = var.smoke_check
  wait_for_exit = true
  labels        = merge(local.labels, { role = "smoke-check" })
}

output "workspace_id" {
  description = "Sandbox to run the job's code in."
  value       = rarecloud_sandbox.workspace.id
}

output "smoke_check_exit_code" {
  description = "Exit code of the smoke check (0 when it passed)."
  value       = rarecloud_sandbox.smoke_check.exit_code
}
