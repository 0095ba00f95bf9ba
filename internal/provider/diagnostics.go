package provider

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// addAPIError reports a failed API call: a short, action-first summary
// and a detail naming the sandbox and the API's code and message.
func addAPIError(diags *diag.Diagnostics, summary, sandboxID string, err error) {
	diags.AddError(summary, apiErrorDetail(sandboxID, err))
}

func apiErrorDetail(sandboxID string, err error) string {
	var b strings.Builder
	if sandboxID != "" {
		fmt.Fprintf(&b, "Sandbox %s: ", sandboxID)
	}
	apiErr, ok := client.AsAPIError(err)
	if !ok {
		b.WriteString(err.Error())
		return b.String()
	}
	switch {
	case client.IsUnauthorized(err):
		fmt.Fprintf(&b, "the RareCloud API rejected the API token (HTTP %d %s: %s). "+
			"Check the provider's token argument or the %s / %s environment variable; the token may be mistyped, revoked or expired.",
			apiErr.Status, apiErr.Code, apiErr.Message, EnvToken, EnvTokenAlt)
	case client.IsInsufficientScope(err):
		scope := client.MissingScope(err)
		fmt.Fprintf(&b, "the API token lacks scope %s (HTTP %d %s: %s). "+
			"Reading sandboxes needs services:read; creating and deleting them needs services:write. "+
			"Scopes match exactly: services:write does not include services:read. Create a token with both scopes.",
			scope, apiErr.Status, apiErr.Code, apiErr.Message)
	case apiErr.Status == http.StatusTooManyRequests:
		fmt.Fprintf(&b, "the RareCloud API kept answering HTTP 429 %s (too many requests): %s", apiErr.Code, apiErr.Message)
		if apiErr.Attempts > 1 {
			fmt.Fprintf(&b, "; the provider gave up after %d attempts over %s", apiErr.Attempts, apiErr.Elapsed.Round(time.Millisecond))
		}
		b.WriteString(". Run Terraform with fewer operations at once (terraform apply -parallelism=2; the default is 10), " +
			"raise the provider's max_retry_duration, or try again later.")
	case apiErr.Code == client.CodeVCPULimitExceeded:
		b.WriteString(vcpuLimitDetail(err, apiErr))
	default:
		fmt.Fprintf(&b, "the RareCloud API answered HTTP %d %s: %s", apiErr.Status, apiErr.Code, apiErr.Message)
		if hint := hintFor(apiErr.Code); hint != "" {
			b.WriteString(". ")
			b.WriteString(hint)
		}
	}
	return b.String()
}

func hintFor(code string) string {
	switch code {
	case client.CodeUnknownTemplate:
		return "The data source rarecloud_sandbox_templates lists the templates there are."
	case client.CodeImagePullFailed:
		return "Only public images are supported; check the image reference."
	case client.CodeImageNotAllowed:
		return "Change the image: a sandbox image may not declare a VOLUME at /, in /proc, /sys or /dev, nor more than 16 of them."
	case client.CodeImageRegistryNotAllowed:
		return "Use an image from a public registry; a registry on a loopback, private or link-local address is pulled from only when the API's operator allows it."
	case client.CodeImagePrivateNotSupported:
		return "Private custom images are not supported yet, only public ones."
	case client.CodeImageTooLarge:
		return "Use a smaller image; the API bounds an image's size, compressed and unpacked."
	case client.CodeImagePlatformMismatch:
		return "Use an image built for the platform the API runs sandboxes on (the local backend's is its host's), or a multi-platform image."
	case client.CodeServiceUnavailable:
		return "The sandbox service is not available right now; try again later."
	case client.CodeEgressControlUnavailable:
		return "This API does not enforce egress control (an extension of API v1), or has it turned off. Remove " +
			"egress_mode and egress_allowlist (or set egress_mode = \"ALLOW_ALL\") to accept full outbound access, or ask " +
			"the API's operator to turn egress control on."
	case client.CodeInvalidEgress:
		return "Check egress_mode and egress_allowlist: host names of two or more labels or \"*.example.com\" wildcards, " +
			"no IP addresses, only with egress_mode = \"ALLOW_LIST\"."
	}
	return ""
}

// warnIfMocked adds a warning when the API answered in test mode.
func warnIfMocked(diags *diag.Diagnostics, info *client.CallInfo) {
	if info == nil || !info.Mocked.Load() {
		return
	}
	diags.AddWarning("The RareCloud API answered in test mode",
		"At least one answer carried \"mocked\": true: the API is running in test mode, where code is not really executed. "+
			"Treat these results as test answers, never as real results. Production never answers in test mode.")
}

// vcpuLimitDetail explains a create refused for the account's vCPU limit:
// the limit, the use, and what frees capacity.
func vcpuLimitDetail(err error, apiErr *client.APIError) string {
	var b strings.Builder
	b.WriteString("the account is at its vCPU limit")
	if u, _ := client.VCPULimit(err); u.Known {
		fmt.Fprintf(&b, ": its live sandboxes use %s of its %s vCPUs", fmtVCPU(u.InUse), fmtVCPU(u.Limit))
	}
	fmt.Fprintf(&b, " (HTTP %d %s: %s). ", apiErr.Status, apiErr.Code, apiErr.Message)
	b.WriteString("Every pending or running sandbox counts its template's vCPUs; ended and deleted ones count nothing. " +
		"To create this sandbox: delete sandboxes you no longer need (the data source rarecloud_sandboxes lists them; " +
		"capacity frees at once), choose a template with fewer vCPUs, or have the account's limit raised by the API's " +
		"operator (on the RareCloud test backend: \"accounts\": [{\"account\": ..., \"vcpuLimit\": N}] in the tokens " +
		"file, or --vcpu-limit for every account).")
	return b.String()
}

func fmtVCPU(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
