# A Python sandbox to run code in through the API or the CLI.
resource "rarecloud_sandbox" "ci" {
  template   = "python"
  timeout_ms = 300000 # 5 minutes
}

output "sandbox_id" {
  value = rarecloud_sandbox.ci.id
}

# A run-mode job: the image's program runs to completion, the apply waits
# for its exit code and fails when it is not 0 (with the end of the job's
# logs in the error). The failed sandbox is tainted: the next apply runs
# the job again.
resource "rarecloud_sandbox" "tests" {
  template             = "python"
  command              = ["sh", "-c", "python3 -c 'import sys; print(sys.version)'"]
  wait_for_exit        = true
  fail_on_nonzero_exit = true
  timeout_ms           = 900000 # 15 minutes: the sandbox's lifetime on the API

  env = {
    CI = "true"
  }

  labels = {
    pipeline = "nightly"
  }

  timeouts {
    create = "15m" # how long the apply waits for the job
  }
}
