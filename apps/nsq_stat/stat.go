package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/nsqgo/nsq/internal/statsdoc"
	"github.com/nsqgo/nsq/internal/toolutil"
)

type stater struct {
	opts   *options
	client *http.Client
	log    *toolutil.Logger
}

const headerEvery = 25

// loop prints a line per interval; the first poll is only the baseline
// for the rates.
func (s *stater) loop(ctx context.Context, w io.Writer) error {
	var prev *statsdoc.Channel
	var prevAt time.Time
	ticker := time.NewTicker(s.opts.interval)
	defer ticker.Stop()
	for rows := 0; !s.opts.count.set || rows < s.opts.count.value; {
		if rows%headerEvery == 0 && (prev == nil || rows > 0) {
			fmt.Fprintf(w, "%s+%s+%s\n",
				"------rate------",
				"----------------depth----------------",
				"--------------metadata---------------")
			fmt.Fprintf(w, "%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s\n",
				"ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs", "clients")
		}
		cur, err := s.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		now := time.Now()
		if prev != nil {
			secs := now.Sub(prevAt).Seconds()
			in := int64(cur.MessageCount) - int64(prev.MessageCount) // a node gone makes it negative
			out := in - (cur.Depth - prev.Depth)
			fmt.Fprintf(w, "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n",
				int64(float64(in)/secs), int64(float64(out)/secs),
				cur.Depth, cur.Depth-cur.BackendDepth, cur.BackendDepth, cur.InFlightCount, cur.DeferredCount,
				cur.RequeueCount, cur.TimeoutCount, cur.MessageCount, cur.ClientCount)
			rows++
			if s.opts.count.set && rows == s.opts.count.value {
				return nil
			}
		}
		prev, prevAt = cur, now
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
	return nil
}

// poll sums the channel over every node that has it. Nodes that fail to
// answer are reported and skipped; it fails if none has the channel.
func (s *stater) poll(ctx context.Context) (*statsdoc.Channel, error) {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var sum statsdoc.Channel
	found := false
	var errs []error
	for _, node := range nodes {
		c, ok, err := s.nodeChannel(ctx, node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			sum.AddCounts(&c)
			found = true
		}
	}
	if len(errs) > 0 && len(errs) == len(nodes) {
		return nil, fmt.Errorf("failed to get nsqd stats: %w", errors.Join(errs...))
	}
	for _, err := range errs {
		s.log.Warnf("%v", err)
	}
	if !found {
		return nil, fmt.Errorf("failed to find channel(%s) in stats metadata for topic(%s)", s.opts.channel, s.opts.topic)
	}
	return &sum, nil
}

// nodes returns the nsqd HTTP addresses to poll.
func (s *stater) nodes(ctx context.Context) ([]string, error) {
	if len(s.opts.lookupdHTTPAddrs) == 0 {
		return s.opts.nsqdHTTPAddrs, nil
	}
	var nodes []string
	var errs []error
	for _, addr := range s.opts.lookupdHTTPAddrs {
		var resp struct {
			Producers []struct {
				BroadcastAddress string `json:"broadcast_address"`
				HTTPPort         int    `json:"http_port"`
			} `json:"producers"`
		}
		u := toolutil.HTTPURL(addr, "/lookup?topic="+url.QueryEscape(s.opts.topic))
		if err := toolutil.GetJSON(ctx, s.client, u, &resp); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range resp.Producers {
			nodes = append(nodes, net.JoinHostPort(p.BroadcastAddress, strconv.Itoa(p.HTTPPort)))
		}
	}
	if len(errs) == len(s.opts.lookupdHTTPAddrs) {
		return nil, fmt.Errorf("failed to get topic producers: %w", errors.Join(errs...))
	}
	for _, err := range errs {
		s.log.Warnf("%v", err)
	}
	slices.Sort(nodes)
	return slices.Compact(nodes), nil
}

// nodeChannel reads the channel from one nsqd's /stats.
func (s *stater) nodeChannel(ctx context.Context, node string) (statsdoc.Channel, bool, error) {
	var doc statsdoc.Doc
	q := url.Values{"format": {"json"}, "topic": {s.opts.topic}, "channel": {s.opts.channel},
		"include_clients": {"false"}, "include_mem": {"false"}}
	if err := toolutil.GetJSON(ctx, s.client, toolutil.HTTPURL(node, "/stats?"+q.Encode()), &doc); err != nil {
		return statsdoc.Channel{}, false, err
	}
	for _, t := range doc.Topics {
		if t.TopicName != s.opts.topic {
			continue
		}
		for _, c := range t.Channels {
			if c.ChannelName == s.opts.channel {
				return c, true, nil
			}
		}
	}
	return statsdoc.Channel{}, false, nil
}
