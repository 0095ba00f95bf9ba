# A sandbox for untrusted, AI-written code: it may reach only the Python
# package index, and it ends by itself after 10 minutes without activity
# (commands, code runs, file reads and writes).
resource "rarecloud_sandbox" "agent" {
  template   = "python"
  timeout_ms = 3600000 # 1 hour at most; changes in place

  egress_mode      = "ALLOW_LIST"
  egress_allowlist = ["pypi.org", "*.pythonhosted.org"]

  idle_timeout_ms = 600000 # 10 minutes; changes in place, 0 turns it off
}

# No network at all.
resource "rarecloud_sandbox" "offline" {
  template    = "python"
  egress_mode = "DENY_ALL"
}

output "agent_idle_expires_at" {
  value = rarecloud_sandbox.agent.idle_expires_at
}
