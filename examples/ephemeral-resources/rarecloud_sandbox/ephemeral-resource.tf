# A sandbox for one Terraform run (Terraform 1.10 and later): created when
# Terraform opens it, in plan and again in apply, and deleted when Terraform
# is done with it. Nothing of it is stored in the plan or state.
ephemeral "rarecloud_sandbox" "smoke" {
  template   = "python"
  timeout_ms = 600000 # deleted after 10 minutes even if Terraform is killed

  labels = {
    purpose = "smoke-test"
  }
}

# Use it while the run lasts, where Terraform accepts ephemeral values: here a
# provisioner runs a smoke test in it with the RareCloud CLI whenever the
# application version changes.
variable "app_version" {
  type    = string
  default = "1.0.0"
}

resource "terraform_data" "smoke_test" {
  triggers_replace = [var.app_version]

  provisioner "local-exec" {
    command = "rarecloud sandbox run \"$SANDBOX_ID\" --file smoke_test.py"
    environment = {
      SANDBOX_ID = ephemeral.rarecloud_sandbox.smoke.id
    }
  }
}
