package admin

import (
	"context"
	"fmt"
	"html/template"
	"strings"
	"sync"
	"time"
)

// maxSeries bounds the graphs' memory: beyond it new channels get no
// history (topics are recorded first). A sample is 40 bytes, so with the
// default 360 samples a full series costs ~14 KB: a cluster of 1,000
// channels ~14 MB, the cap ~290 MB.
const maxSeries = 20000

// sample is one poll of a topic or channel, summed over its nodes.
type sample struct {
	at       time.Time
	messages int64 // cumulative message_count: rates come from deltas
	depth    int64
	inFlight int64
}

// maxSamples caps a series (24 hours at the default 10 s interval), however
// long --stats-history is for --stats-interval.
const maxSamples = 8640

// ring keeps the last capacity samples of one topic or channel. It grows
// as samples arrive, so a young or short-lived series costs little.
type ring struct {
	buf      []sample
	capacity int
	next     int // where the next sample goes once buf is full
	seen     uint64
}

func (r *ring) add(s sample) {
	if len(r.buf) < r.capacity {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % r.capacity
}

// samples returns the kept samples, oldest first.
func (r *ring) samples() []sample {
	return append(append([]sample(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// history is the in-process store behind the graphs: one ring per topic
// ("topic") and per channel ("topic/channel").
type history struct {
	mu       sync.Mutex
	capacity int
	gen      uint64
	series   map[string]*ring
}

func newHistory(capacity int) *history {
	return &history{capacity: min(max(capacity, 2), maxSamples), series: make(map[string]*ring)}
}

func seriesKey(topic, channel string) string {
	if channel == "" {
		return topic
	}
	return topic + "/" + channel
}

// record adds one poll of every topic and channel and forgets the series of
// topics and channels that are gone.
func (h *history) record(at time.Time, topics []*TopicStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	put := func(key string, s sample) {
		r, ok := h.series[key]
		if !ok {
			if len(h.series) >= maxSeries {
				return
			}
			r = &ring{capacity: h.capacity}
			h.series[key] = r
		}
		r.seen = h.gen
		r.add(s)
	}
	for _, t := range topics {
		var inFlight int64
		for _, c := range t.Channels {
			inFlight += c.InFlightCount
		}
		// A topic's backlog is its own depth plus its channels': what waits.
		put(seriesKey(t.TopicName, ""), sample{at, t.MessageCount, t.Depth + t.ChannelDepth(), inFlight})
	}
	for _, t := range topics {
		for _, c := range t.Channels {
			put(seriesKey(t.TopicName, c.ChannelName), sample{at, c.MessageCount, c.Depth, c.InFlightCount})
		}
	}
	for k, r := range h.series {
		if r.seen != h.gen {
			delete(h.series, k)
		}
	}
}

func (h *history) samples(topic, channel string) []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.series[seriesKey(topic, channel)]
	if !ok {
		return nil
	}
	return r.samples()
}

// pollStats polls the cluster every StatsInterval until ctx ends (unless
// a page has just done so).
func (a *Admin) pollStats(ctx context.Context) {
	interval := a.opts.Load().StatsInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := a.clusterSnapshot(quiet(ctx), interval/2); err != nil && ctx.Err() == nil {
			a.logger.Debug("stats poll failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// graph is one drawn series for a page.
type graph struct {
	Title string
	Last  string
	SVG   template.HTML
}

// graphs draws message rate, depth and in-flight for topic (or channel).
func (h *history) graphs(topic, channel string) []graph {
	ss := h.samples(topic, channel)
	if len(ss) < 2 {
		return nil
	}
	rates := make([]float64, 0, len(ss)-1)
	for i := 1; i < len(ss); i++ {
		dt := ss[i].at.Sub(ss[i-1].at).Seconds()
		d := float64(ss[i].messages - ss[i-1].messages)
		if dt <= 0 || d < 0 { // a restarted node resets its counters
			d = 0
		}
		rates = append(rates, d/max(dt, 1e-9))
	}
	depth := make([]float64, len(ss))
	inFlight := make([]float64, len(ss))
	for i, s := range ss {
		depth[i], inFlight[i] = float64(s.depth), float64(s.inFlight)
	}
	span := ss[len(ss)-1].at.Sub(ss[0].at).Round(time.Second)
	depthTitle := "Depth"
	if channel == "" {
		depthTitle = "Backlog (topic + channels)"
	}
	return []graph{
		drawGraph("Message rate (msgs/s)", rates, span),
		drawGraph(depthTitle, depth, span),
		drawGraph("In flight", inFlight, span),
	}
}

// drawGraph renders values as an inline SVG line over span, scaled to the
// largest value. Only numbers go into the markup, so it is safe HTML.
func drawGraph(title string, values []float64, span time.Duration) graph {
	const w, h = 320.0, 80.0
	peak := 0.0
	for _, v := range values {
		peak = max(peak, v)
	}
	var pts strings.Builder
	for i, v := range values {
		x := w * float64(i) / float64(max(len(values)-1, 1))
		y := h - 4
		if peak > 0 {
			y = 4 + (h-8)*(1-v/peak)
		}
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
	}
	last := values[len(values)-1]
	label := fmt.Sprintf("%s over the last %s: now %s, peak %s", title, span, formatNum(last), formatNum(peak))
	svg := fmt.Sprintf(`<svg class="graph" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`+
		`<title>%s</title><line x1="0" y1="%.0f" x2="%.0f" y2="%.0f" class="axis"/>`+
		`<polyline points="%s" class="line"/><text x="2" y="12" class="peak">%s</text></svg>`,
		w, h, w, h, template.HTMLEscapeString(label), template.HTMLEscapeString(label), h-1, w, h-1,
		strings.TrimSpace(pts.String()), formatNum(peak))
	return graph{Title: title, Last: formatNum(last), SVG: template.HTML(svg)} //nolint:gosec // numbers and escaped text only
}

func formatNum(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}
