package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
)

// Schema implements resource.Resource.
func (r *sandboxResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A RareCloud AI sandbox: an isolated Linux environment in its own hardened container. " +
			"`timeout_ms` and `idle_timeout_ms` change in place (through `PATCH /v1/sandboxes/{id}`, an extension of API v1; " +
			"against an API without it the apply fails and says to replace the sandbox with `terraform apply -replace`), " +
			"as do `wait_for_exit`, `fail_on_nonzero_exit` and `timeouts`; changing any other argument the API holds replaces " +
			"the sandbox.\n\n" +
			"A sandbox that the API reports gone (deleted, or expired at `expires_at`) drops out of state and is created " +
			"again on the next apply. A sandbox the API ended (`terminated`: idle timeout, out of memory, container lost) " +
			"drops out too, with a warning that names the reason. Any answer that is not the API's own \"not found\" is an " +
			"error and leaves the state alone.",
		Attributes: resourceAttributes(),
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{
				Create:            true,
				Update:            true,
				Delete:            true,
				CreateDescription: "How long Terraform waits for a new sandbox to be running (with `wait_for_exit`, exited). Defaults to 10m.",
				UpdateDescription: "How long Terraform waits for an in-place change: a new `timeout_ms` or `idle_timeout_ms`, or `wait_for_exit` turned on. Defaults to 10m.",
				DeleteDescription: "How long Terraform waits for a sandbox to be deleted. Defaults to 5m.",
			}),
		},
	}
}
