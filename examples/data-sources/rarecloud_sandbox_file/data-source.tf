resource "rarecloud_sandbox" "job" {
  template = "python"
}

resource "rarecloud_sandbox_command" "report" {
  sandbox_id = rarecloud_sandbox.job.id
  language   = "python"
  code       = "import json; json.dump({'rows': 42}, open('/home/user/report.json', 'w'))"
}

# Read after the command has run: depends_on makes Terraform wait for it.
data "rarecloud_sandbox_file" "report" {
  sandbox_id = rarecloud_sandbox.job.id
  path       = "/home/user/report.json"

  depends_on = [rarecloud_sandbox_command.report]
}

output "rows" {
  value = jsondecode(data.rarecloud_sandbox_file.report.content).rows
}
