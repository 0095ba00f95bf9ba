# A Python sandbox to run code in through the API or the CLI.
resource "rarecloud_sandbox" "ci" {
  template   = "python"
  timeout_ms = 300000 # 5 minutes
}

output "sandbox_id" {
  value = rarecloud_sandbox.ci.id
}

# A run-mode job: the image's program runs to completion and the apply
# waits for its exit code.
resource "rarecloud_sandbox" "tests" {
  template      = "python"
  command       = ["sh", "-c", "python3 -c 'import sys; print(sys.version)'"]
  wait_for_exit = true
  timeout_ms    = 900000 # 15 minutes

  env = {
    CI = "true"
  }

  labels = {
    pipeline = "nightly"
  }

  timeouts {
    create = "15m"
  }

  # Fail the apply when the job fails.
  lifecycle {
    postcondition {
      condition     = self.exit_code == 0
      error_message = "The job exited with a non-zero exit code."
    }
  }
}
