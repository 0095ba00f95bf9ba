import {
  to = rarecloud_sandbox.ci
  id = "sbx-0123456789abcdef"
}
