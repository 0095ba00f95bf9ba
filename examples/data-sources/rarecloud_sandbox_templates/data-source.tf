data "rarecloud_sandbox_templates" "all" {}

output "templates_with_python" {
  value = [for t in data.rarecloud_sandbox_templates.all.templates : t.name if contains(t.languages, "python")]
}
