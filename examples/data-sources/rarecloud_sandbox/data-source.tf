# One sandbox by id, for example a job a pipeline started: its status,
# exit code and expiry.
variable "sandbox_id" {
  type = string
}

data "rarecloud_sandbox" "job" {
  id = var.sandbox_id
}

output "job" {
  value = {
    status     = data.rarecloud_sandbox.job.status     # pending, running, exited or terminated
    exit_code  = data.rarecloud_sandbox.job.exit_code  # run mode, once the program has exited
    expires_at = data.rarecloud_sandbox.job.expires_at # when it is stopped and deleted
  }
}
