resource "rarecloud_sandbox" "job" {
  template      = "python"
  command       = ["python3", "-c", "print('hello from the job')"]
  wait_for_exit = true
}

data "rarecloud_sandbox_logs" "job" {
  sandbox_id = rarecloud_sandbox.job.id
}

output "job_output" {
  value = data.rarecloud_sandbox_logs.job.logs
}
