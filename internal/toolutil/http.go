package toolutil

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// HTTPTimeoutFlags are NSQ's --http-client-connect-timeout and
// --http-client-request-timeout.
type HTTPTimeoutFlags struct {
	Connect time.Duration
	Request time.Duration
}

// Define adds both flags with the tool's defaults.
func (h *HTTPTimeoutFlags) Define(fs *flag.FlagSet, connect, request time.Duration) {
	fs.DurationVar(&h.Connect, "http-client-connect-timeout", connect, "timeout for HTTP connect")
	fs.DurationVar(&h.Request, "http-client-request-timeout", request, "timeout for HTTP request")
}

// Validate requires both timeouts to be positive.
func (h *HTTPTimeoutFlags) Validate() error {
	if h.Connect <= 0 {
		return Usagef("--http-client-connect-timeout should be positive")
	}
	if h.Request <= 0 {
		return Usagef("--http-client-request-timeout should be positive")
	}
	return nil
}

// Client returns an HTTP client with these timeouts and connection reuse
// sized for maxIdlePerHost concurrent requests per host.
func (h *HTTPTimeoutFlags) Client(maxIdlePerHost int) *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: h.Connect, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: h.Request,
		MaxIdleConnsPerHost:   max(maxIdlePerHost, 2),
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: h.Request}
}

// HTTPURL adds http:// to a host:port address given without a scheme.
func HTTPURL(addr, path string) string {
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/") + path
}

// GetJSON GETs url and decodes a 200 JSON answer into v.
func GetJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decoding JSON: %w", url, err)
	}
	return nil
}
