resource "rarecloud_sandbox" "dev" {
  template = "python"
}

resource "rarecloud_sandbox_file" "setup" {
  sandbox_id = rarecloud_sandbox.dev.id
  path       = "/home/user/setup.sh"
  content    = <<-EOT
    set -e
    mkdir -p /home/user/data
    python3 -c 'import json; print(json.dumps({"ready": True}))' > /home/user/data/status.json
  EOT
}

# A shell command (sh -c), run again whenever setup.sh changes. A failure
# fails the apply, with the end of its stderr, and the next apply runs it
# again.
resource "rarecloud_sandbox_command" "setup" {
  sandbox_id           = rarecloud_sandbox.dev.id
  command              = "sh /home/user/setup.sh"
  timeout_ms           = 300000
  fail_on_nonzero_exit = true

  triggers = {
    script = rarecloud_sandbox_file.setup.sha256
  }
}

# A program in a fresh interpreter (run_code).
resource "rarecloud_sandbox_command" "hello" {
  sandbox_id = rarecloud_sandbox.dev.id
  language   = "python"
  code       = "import platform; print(platform.python_version())"
}

output "python_version" {
  value = trimspace(rarecloud_sandbox_command.hello.stdout)
}
