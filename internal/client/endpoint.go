package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// endpointCheck remembers, per client, that the base URL answered an
// authenticated API call in the API's envelope. Until it has, no "not
// found" answer is believed: a wrong URL (a web server, a proxy, the API
// under a wrong prefix) must never make Terraform forget a sandbox.
type endpointCheck struct {
	mu        sync.Mutex
	confirmed bool
}

// probePath is the authenticated call that confirms the endpoint: every
// token of the API may list the templates.
const probePath = "/sandboxes/templates"

// EndpointError says that the base URL did not answer as the RareCloud
// API: an answer that is not the API's JSON envelope, or a "not found"
// from a URL where the API's own routes are not found either.
type EndpointError struct {
	// URL is the client's base URL and Source where it came from.
	URL    string
	Source string
	// Method and Path name the request, Status its answer's HTTP status.
	Method string
	Path   string
	Status int
	// Reason says what was wrong with the answer.
	Reason string
}

// Error implements error.
func (e *EndpointError) Error() string {
	return fmt.Sprintf("%s %s: the endpoint %s (set by %s) does not answer as the RareCloud API: %s. "+
		"Check the URL: it must be the API's base, such as %s (the /v1 suffix may be left out)",
		e.Method, e.Path, e.URL, e.Source, e.Reason, DefaultBaseURL)
}

// IsEndpointError reports whether err says the base URL is not the API.
func IsEndpointError(err error) bool {
	var e *EndpointError
	return errors.As(err, &e)
}

func (c *Client) endpointError(req request, status int, reason string) *EndpointError {
	return &EndpointError{
		URL: c.BaseURL(), Source: c.baseSource, Method: req.method, Path: req.path, Status: status, Reason: reason,
	}
}

// confirmEndpoint makes sure, once per client, that the base URL is the
// RareCloud API: GET /sandboxes/templates must answer in the envelope,
// either with data or with the API's own INSUFFICIENT_SCOPE (which it
// only gives on a route it has). A failed check is not remembered: the
// next "not found" checks again.
func (c *Client) confirmEndpoint(ctx context.Context, notFound *APIError) error {
	c.endpoint.mu.Lock()
	defer c.endpoint.mu.Unlock()
	if c.endpoint.confirmed {
		return nil
	}
	var out []Template
	err := c.do(ctx, request{method: http.MethodGet, path: probePath, probe: true}, &out)
	if err == nil || HasCode(err, CodeInsufficientScope) {
		c.endpoint.confirmed = true
		return nil
	}
	if IsEndpointError(err) || IsUnreachable(err) || ctx.Err() != nil {
		return err
	}
	var reason string
	if apiErr, ok := AsAPIError(err); ok {
		reason = fmt.Sprintf("it answered %s %s with HTTP %d %s (%s), and then GET %s, a route every RareCloud API has, with HTTP %d %s (%s)",
			notFound.Method, notFound.Path, notFound.Status, notFound.Code, notFound.Message,
			probePath, apiErr.Status, apiErr.Code, apiErr.Message)
	} else {
		reason = fmt.Sprintf("it answered %s %s with HTTP %d %s (%s), and then GET %s failed: %v",
			notFound.Method, notFound.Path, notFound.Status, notFound.Code, notFound.Message, probePath, err)
	}
	if IsUnauthorized(err) {
		reason += "; if this is the API, the token is rejected too"
	}
	return c.endpointError(request{method: notFound.Method, path: notFound.Path}, notFound.Status, reason)
}

// UnreachableError says that no answer came from the API: the connection
// failed, the host name did not resolve, or the TLS handshake failed.
type UnreachableError struct {
	URL    string
	Source string
	Method string
	Path   string
	// Attempts and Elapsed say how long the client tried.
	Attempts int
	Elapsed  time.Duration
	Err      error
}

// Error implements error.
func (e *UnreachableError) Error() string {
	tries := ""
	if e.Attempts > 1 {
		tries = fmt.Sprintf(" (%d attempts over %s)", e.Attempts, e.Elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("could not reach the RareCloud API at %s (set by %s)%s: %s %s: %v. %s",
		e.URL, e.Source, tries, e.Method, e.Path, e.Err, reachHint(e.Err))
}

// Unwrap returns the network error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err says that the API could not be reached.
func IsUnreachable(err error) bool {
	var e *UnreachableError
	return errors.As(err, &e)
}

// reachFailure classifies a transport error.
type reachFailure int

const (
	reachOther reachFailure = iota
	reachRefused
	reachUnknownHost
	reachTLS
)

func classifyReach(err error) reachFailure {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return reachUnknownHost
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return reachRefused
	}
	var (
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		verifyErr  *tls.CertificateVerificationError
		recordErr  tls.RecordHeaderError
		alertErr   tls.AlertError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalidErr) ||
		errors.As(err, &verifyErr) || errors.As(err, &recordErr) || errors.As(err, &alertErr) {
		return reachTLS
	}
	// net/http reports a plain-HTTP answer to a TLS handshake only in words.
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return reachTLS
	}
	return reachOther
}

// permanentReach says whether retrying cannot help: a name that does not
// resolve or a certificate that is not trusted stays that way.
func permanentReach(err error) bool {
	switch classifyReach(err) {
	case reachUnknownHost:
		var dnsErr *net.DNSError
		return errors.As(err, &dnsErr) && dnsErr.IsNotFound
	case reachTLS:
		return true
	}
	return false
}

func reachHint(err error) string {
	switch classifyReach(err) {
	case reachRefused:
		return "Nothing accepts connections at that address: check the host and port of the URL, and that the API is running there."
	case reachUnknownHost:
		return "The host name does not resolve: check the spelling of the URL and this machine's DNS."
	case reachTLS:
		return "The TLS handshake failed: check that the URL's scheme matches the server (https:// or http://) " +
			"and that the server's certificate is valid and trusted by this machine."
	}
	return "Check the URL, this machine's network and any proxy (HTTPS_PROXY) between it and the API."
}
