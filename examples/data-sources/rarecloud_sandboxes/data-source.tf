# The sandboxes this workspace's nightly pipeline left running. The labels
# are those the sandboxes got from the provider's default_labels and their
# own labels.
data "rarecloud_sandboxes" "left_running" {
  labels = {
    workspace = terraform.workspace
    pipeline  = "nightly"
  }
  status = "running"
}

output "left_running" {
  value = [
    for s in data.rarecloud_sandboxes.left_running.sandboxes :
    "${s.id} (${s.template}, created ${s.created_at}, expires ${s.expires_at})"
  ]
}

# Report them as a warning on every plan and apply.
check "nothing_left_running" {
  assert {
    condition     = length(data.rarecloud_sandboxes.left_running.ids) == 0
    error_message = "Sandboxes left running: ${join(", ", data.rarecloud_sandboxes.left_running.ids)}."
  }
}
