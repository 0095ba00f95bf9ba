data "rarecloud_sandbox_template" "python" {
  name = "python"
}

output "python_memory_mb" {
  value = data.rarecloud_sandbox_template.python.memory_mb
}
