terraform {
  required_providers {
    rarecloud = {
      source  = "rarecloudio/rarecloud"
      version = "~> 0.4"
    }
  }
}

# The token is best left to the RARECLOUD_TOKEN environment variable.
provider "rarecloud" {
  # api = "https://api.rarecloud.io/v1" # the default; or RARECLOUD_API

  # Added to the labels of every sandbox this provider creates, so each one
  # can be traced to its workspace (and found with rarecloud_sandboxes).
  default_labels = {
    managed-by = "terraform"
    workspace  = terraform.workspace
  }
}
