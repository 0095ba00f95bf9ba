# A smoke test in a sandbox that lives for one Terraform run (Terraform 1.10
# and later): created when Terraform opens it, in plan and again in apply,
# and deleted when Terraform is done with it. Nothing of it is stored in the
# plan or state. It runs in run mode, so the test is its program: the open
# waits until it has exited, and a precondition stops the plan or the apply
# when it failed. Nothing but Terraform is needed.
variable "app_version" {
  type    = string
  default = "1.0.0"
}

ephemeral "rarecloud_sandbox" "smoke" {
  template      = "python"
  timeout_ms    = 600000 # deleted after 10 minutes even if Terraform is killed
  wait_for_exit = true

  env = {
    APP_VERSION = var.app_version
  }

  command = ["python3", "-c", <<-EOT
    import os, re, sys
    version = os.environ["APP_VERSION"]
    ok = re.fullmatch(r"\d+\.\d+\.\d+", version) is not None
    print(f"smoke test of version {version}: {'ok' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)
  EOT
  ]

  labels = {
    purpose = "smoke-test"
  }
}

# Released only when the smoke test has passed. A condition may read the
# ephemeral sandbox's exit_code: conditions are checked, never stored.
resource "terraform_data" "release" {
  input = var.app_version

  lifecycle {
    precondition {
      condition     = ephemeral.rarecloud_sandbox.smoke.exit_code == 0
      error_message = "The smoke test of version ${var.app_version} failed: it exited with a non-zero code."
    }
  }
}
