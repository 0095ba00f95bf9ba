// Package client is a typed client for the RareCloud API v1 (AI Sandboxes).
//
// It decodes the API's envelope into typed values and *APIError, retries
// what is safe to retry with exponential backoff and jitter, and logs every
// request through the tflog subsystem "api" with the token redacted.
//
// Its wire types (sandboxes.go, the envelope in request.go) and error codes
// (errors.go) are its own, written apart from the test backend's; the
// contract tests (contract_test.go, contract_requests_test.go) hold them
// to the API's description, testbackend/apispec/openapi.yaml.
package client

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultBaseURL is the production API.
const DefaultBaseURL = "https://api.rarecloud.io/v1"

// LogSubsystem is the tflog subsystem of the client's request logs. Its
// level follows TF_LOG_PROVIDER_RARECLOUD_API (then TF_LOG_PROVIDER, TF_LOG).
const LogSubsystem = "api"

// Defaults of Config.
const (
	DefaultMaxRetries    = 6
	DefaultRetryWaitMin  = 100 * time.Millisecond
	DefaultRetryWaitMax  = 5 * time.Second
	DefaultMaxRetryAfter = 60 * time.Second
	// DefaultMaxRetryTime bounds how long one call keeps retrying: no
	// retry starts later than this after the call's first attempt.
	DefaultMaxRetryTime = 2 * time.Minute
	DefaultUserAgent    = "terraform-provider-rarecloud/dev"
	maxResponseBytes    = 64 << 20
)

// Config configures a Client. Zero values take the defaults above.
type Config struct {
	// BaseURL is the API base, with or without the /v1 suffix.
	BaseURL string
	// BaseURLSource says where BaseURL came from, for error messages, for
	// example `the provider's "api" argument`. Empty means SourceDefault
	// when BaseURL is empty and "the configuration" otherwise.
	BaseURLSource string
	// Token is the API token (rc_pat_...).
	Token string
	// UserAgent is sent with every request.
	UserAgent string
	// HTTPClient carries the requests; its Timeout, if any, bounds one attempt.
	HTTPClient *http.Client
	// MaxRetries bounds the retries of one call (attempts = MaxRetries + 1).
	// A negative value disables retries.
	MaxRetries int
	// RetryWaitMin and RetryWaitMax bound the exponential backoff.
	RetryWaitMin, RetryWaitMax time.Duration
	// MaxRetryAfter caps how long a Retry-After header may make the client wait.
	MaxRetryAfter time.Duration
	// MaxRetryTime bounds the total time of one call's retries.
	MaxRetryTime time.Duration
}

// SourceDefault is the BaseURLSource of the built-in default URL.
const SourceDefault = "the default"

// Client calls the RareCloud API. It is safe for concurrent use.
type Client struct {
	baseURL       *url.URL
	token         string
	userAgent     string
	http          *http.Client
	maxRetries    int
	waitMin       time.Duration
	waitMax       time.Duration
	maxRetryAfter time.Duration
	maxRetryTime  time.Duration
	mocked        atomic.Bool
	// baseSource says where the base URL came from.
	baseSource string
	// endpoint remembers that the base URL answered as the RareCloud API.
	endpoint endpointCheck
	// ext is what the API's answers said of its extensions.
	ext *extensions
}

// NormalizeBaseURL accepts the API base with or without /v1 (and with or
// without a trailing slash) and returns it ending in /v1.
func NormalizeBaseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return DefaultBaseURL, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid API URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("invalid API URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("invalid API URL %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("invalid API URL %q: no query or fragment allowed", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p
	u.RawPath = ""
	return u.String(), nil
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	base, err := NormalizeBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	c := &Client{
		baseURL:       u,
		token:         cfg.Token,
		userAgent:     cfg.UserAgent,
		http:          cfg.HTTPClient,
		maxRetries:    cfg.MaxRetries,
		waitMin:       cfg.RetryWaitMin,
		waitMax:       cfg.RetryWaitMax,
		maxRetryAfter: cfg.MaxRetryAfter,
		maxRetryTime:  cfg.MaxRetryTime,
		baseSource:    cfg.BaseURLSource,
		ext:           &extensions{},
	}
	if c.baseSource == "" {
		c.baseSource = "the configuration"
		if strings.TrimSpace(cfg.BaseURL) == "" {
			c.baseSource = SourceDefault
		}
	}
	if c.maxRetryTime <= 0 {
		c.maxRetryTime = DefaultMaxRetryTime
	}
	if c.userAgent == "" {
		c.userAgent = DefaultUserAgent
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 5 * time.Minute}
	}
	if c.maxRetries == 0 {
		c.maxRetries = DefaultMaxRetries
	}
	if c.maxRetries < 0 {
		c.maxRetries = 0
	}
	if c.waitMin <= 0 {
		c.waitMin = DefaultRetryWaitMin
	}
	if c.waitMax <= 0 {
		c.waitMax = DefaultRetryWaitMax
	}
	if c.waitMax < c.waitMin {
		c.waitMax = c.waitMin
	}
	if c.maxRetryAfter <= 0 {
		c.maxRetryAfter = DefaultMaxRetryAfter
	}
	return c, nil
}

// BaseURL is the normalised API base, ending in /v1.
func (c *Client) BaseURL() string { return c.baseURL.String() }

// BaseURLSource says where the base URL came from.
func (c *Client) BaseURLSource() string { return c.baseSource }

// UserAgent is the User-Agent the client sends.
func (c *Client) UserAgent() string { return c.userAgent }

// MockedSeen reports whether any answer so far carried "mocked": true.
func (c *Client) MockedSeen() bool { return c.mocked.Load() }
