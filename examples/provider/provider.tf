terraform {
  required_providers {
    rarecloud = {
      source  = "rarecloudio/rarecloud"
      version = "~> 0.1"
    }
  }
}

# The token is best left to the RARECLOUD_TOKEN environment variable.
provider "rarecloud" {
  # api = "https://api.rarecloud.io/v1" # the default; or RARECLOUD_API

  default_labels = {
    managed-by = "terraform"
  }
}
