package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/toolutil"
)

// publishHandler sends one message per request; go-nsq runs -n of them
// concurrently, FINs the message when HandleMessage returns nil and
// requeues it with backoff on an error.
type publishHandler struct {
	client      *http.Client
	selector    toolutil.Selector
	method      string
	contentType string
	headers     http.Header
	sample      float64

	status  *toolutil.Status            // aggregate
	perAddr map[string]*toolutil.Status // with more than one address
}

func (h *publishHandler) HandleMessage(m *nsq.Message) error {
	if h.sample < 1.0 && rand.Float64() > h.sample {
		return nil
	}
	start := time.Now()
	addr, done := h.selector.Pick()
	err := h.send(addr, m.Body)
	done(err)
	if err != nil {
		return fmt.Errorf("%s %s: %w", h.method, addr, err)
	}
	h.perAddr[addr].Done(start)
	h.status.Done(start)
	return nil
}

// send makes the request and accepts only a 2xx answer. It deliberately
// takes no context: on shutdown, requests in progress finish (bounded by
// the HTTP timeouts) so their messages are FIN'd or requeued.
func (h *publishHandler) send(addr string, body []byte) error {
	var req *http.Request
	var err error
	if h.method == http.MethodGet {
		req, err = http.NewRequest(http.MethodGet, strings.Replace(addr, "%s", url.QueryEscape(string(body)), 1), nil)
	} else {
		req, err = http.NewRequest(http.MethodPost, addr, bytes.NewReader(body))
	}
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", userAgent)
	if h.method == http.MethodPost {
		req.Header.Set("Content-Type", h.contentType)
	}
	for k, v := range h.headers { // --header wins, as in NSQ
		req.Header[k] = v
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	// Drain (bounded) so the connection is reused.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return fmt.Errorf("got status code %d", resp.StatusCode)
	}
	return nil
}
