# A sandbox is imported by its id. The API never returns env values, so an
# imported sandbox has no env.
terraform import rarecloud_sandbox.ci sbx-0123456789abcdef
