package sandbox

import "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"

// View is a sandbox as the API shows it.
type View struct {
	ID                string            `json:"id"`
	Status            string            `json:"status"`
	Template          string            `json:"template"`
	Image             string            `json:"image"`
	CreatedAt         string            `json:"createdAt"`
	TimeoutMs         int64             `json:"timeoutMs"`
	ExpiresAt         string            `json:"expiresAt"`
	RunMode           bool              `json:"runMode"`
	Entrypoint        []string          `json:"entrypoint,omitempty"`
	Cmd               []string          `json:"cmd,omitempty"`
	Labels            map[string]string `json:"labels"`
	EnvKeys           []string          `json:"envKeys"`
	ExitCode          *int              `json:"exitCode"`
	EndedAt           string            `json:"endedAt,omitempty"`
	TerminationReason string            `json:"terminationReason,omitempty"`
	EgressMode        string            `json:"egressMode"`
	EgressAllowlist   []string          `json:"egressAllowlist,omitempty"`
	// Extensions of v1 (lifetime.go).
	IdleTimeoutMs      int64  `json:"idleTimeoutMs,omitempty"`
	IdleExpiresAt      string `json:"idleExpiresAt,omitempty"`
	TerminatedAt       string `json:"terminatedAt,omitempty"`
	TerminationMessage string `json:"terminationMessage,omitempty"`
}

// TimeFormat is how the API writes instants: UTC, millisecond precision.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

func view(sb *store.Sandbox) View {
	v := View{
		ID:                sb.ID,
		Status:            sb.Status,
		Template:          sb.Template,
		Image:             sb.Image,
		CreatedAt:         sb.CreatedAt.UTC().Format(TimeFormat),
		TimeoutMs:         sb.TimeoutMs,
		ExpiresAt:         sb.ExpiresAt.UTC().Format(TimeFormat),
		RunMode:           sb.RunMode,
		Entrypoint:        sb.Entrypoint,
		Cmd:               sb.Cmd,
		Labels:            map[string]string{},
		EnvKeys:           envKeys(sb),
		TerminationReason: sb.TerminationReason,
		EgressMode:        egressMode(sb),
		EgressAllowlist:   sb.EgressAllowlist,

		IdleTimeoutMs:      sb.IdleTimeoutMs,
		TerminationMessage: sb.TerminationMessage,
	}
	if sb.IdleExpiresAt != nil && sb.Status == StatusRunning {
		v.IdleExpiresAt = sb.IdleExpiresAt.UTC().Format(TimeFormat)
	}
	if sb.Status == StatusTerminated && sb.EndedAt != nil {
		v.TerminatedAt = sb.EndedAt.UTC().Format(TimeFormat)
	}
	for k, val := range sb.Labels {
		v.Labels[k] = val
	}
	if sb.ExitCode != nil {
		c := *sb.ExitCode
		v.ExitCode = &c
	}
	if sb.EndedAt != nil {
		v.EndedAt = sb.EndedAt.UTC().Format(TimeFormat)
	}
	return v
}

// envKeys are the names of the sandbox's environment variables; records
// written before EnvKeys existed have only Env.
func envKeys(sb *store.Sandbox) []string {
	if sb.EnvKeys != nil {
		return sb.EnvKeys
	}
	return sortedKeys(sb.Env)
}
