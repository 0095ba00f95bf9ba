resource "rarecloud_sandbox" "dev" {
  template = "python"
}

# Text, written as is.
resource "rarecloud_sandbox_file" "config" {
  sandbox_id = rarecloud_sandbox.dev.id
  path       = "/home/user/app/config.json"
  content = jsonencode({
    debug = true
  })
}

# A local file, text or binary; a change to it shows in the plan.
resource "rarecloud_sandbox_file" "script" {
  sandbox_id = rarecloud_sandbox.dev.id
  path       = "/home/user/app/main.py"
  source     = "${path.module}/main.py"
}

# Binary data from base64, decoded inside the sandbox.
resource "rarecloud_sandbox_file" "logo" {
  sandbox_id     = rarecloud_sandbox.dev.id
  path           = "/tmp/logo.png"
  content_base64 = filebase64("${path.module}/logo.png")
}

# A whole folder, one resource per file.
resource "rarecloud_sandbox_file" "tests" {
  for_each = fileset("${path.module}/tests", "**")

  sandbox_id = rarecloud_sandbox.dev.id
  path       = "/home/user/app/tests/${each.value}"
  source     = "${path.module}/tests/${each.value}"
}
