# A secret for a job (Terraform 1.11 and later): env_wo is sent when the
# sandbox is created and never stored in the plan or state. Terraform cannot
# see a change of a write-only value: increase env_wo_version to create a
# new sandbox with the new value.
variable "report_api_token" {
  type      = string
  sensitive = true
  ephemeral = true # Terraform 1.10 and later: the value is never stored either
}

resource "rarecloud_sandbox" "report" {
  template      = "python"
  command       = ["python3", "-c", "import os; print('token of', len(os.environ['REPORT_API_TOKEN']), 'characters')"]
  wait_for_exit = true

  env = {
    REPORT_FORMAT = "html" # not secret: stored in state (marked sensitive)
  }
  env_wo = {
    REPORT_API_TOKEN = var.report_api_token
  }
  env_wo_version = 1
}
