package lookuppeer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxChannelsBody caps a /channels answer read from a lookupd.
const maxChannelsBody = 4 << 20

// defaultQueryTimeout bounds QueryChannels when client is nil (nsqd's
// --http-client-request-timeout default).
const defaultQueryTimeout = 5 * time.Second

// QueryChannels asks every lookupd (HTTP addresses, host:port) for the
// channels of topic and returns their sorted union; nsqd pre-creates them
// for a new topic so no consumer group misses its first messages. The
// lookupds are queried in parallel. Answers that arrived are returned even
// when some lookupds failed; err then describes every failure. Filtering
// out #ephemeral channels is the caller's business. client nil means a
// client with a 5 s timeout.
func QueryChannels(ctx context.Context, client *http.Client, httpAddrs []string, topic string) ([]string, error) {
	if client == nil {
		client = &http.Client{Timeout: defaultQueryTimeout}
	}
	type result struct {
		channels []string
		err      error
	}
	results := make([]result, len(httpAddrs))
	var wg sync.WaitGroup
	for i, addr := range httpAddrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := queryOne(ctx, client, addr, topic)
			results[i] = result{ch, err}
		}()
	}
	wg.Wait()

	seen := make(map[string]struct{})
	out := []string{}
	var errs []error
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		for _, c := range r.channels {
			if _, dup := seen[c]; !dup {
				seen[c] = struct{}{}
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}

// ChannelsURL is the /channels query of topic at the lookupd addr (an
// HTTP address, host:port, or a URL without a path).
func ChannelsURL(addr, topic string) string {
	endpoint := addr
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	return endpoint + "/channels?topic=" + url.QueryEscape(topic)
}

func queryOne(ctx context.Context, client *http.Client, addr, topic string) ([]string, error) {
	endpoint := ChannelsURL(addr, topic)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, fmt.Errorf("lookupd %s: %w", addr, err)
	}
	req.Header.Set("Accept", "application/vnd.nsq; version=1.0")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lookupd %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxChannelsBody))
	if err != nil {
		return nil, fmt.Errorf("lookupd %s: read /channels: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("lookupd %s: /channels answered %d: %.200s", addr, resp.StatusCode, body)
	}
	var v struct {
		Channels []string `json:"channels"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("lookupd %s: decode /channels: %w", addr, err)
	}
	return v.Channels, nil
}
