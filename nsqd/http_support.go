package nsqd

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/statsdoc"
	"github.com/nsqgo/nsq/internal/version"
)

func hostname() (string, error) { return os.Hostname() }

func versionString() string { return version.Version }

func setBlockProfileRate(rate int) { runtime.SetBlockProfileRate(rate) }

// nsqLogLevel is NSQ's number for a log level (its lg.LogLevel: debug 1,
// info 2, warn 3, error 4, fatal 5), which is what NSQ's /config/log_level
// answers, JSON-encoded like every other option.
func nsqLogLevel(l slog.Level) int {
	switch {
	case l <= slog.LevelDebug:
		return 1
	case l <= slog.LevelInfo:
		return 2
	case l <= slog.LevelWarn:
		return 3
	case l <= slog.LevelError:
		return 4
	}
	return 5
}

// memStats is the "memory" object of /stats.
type memStats = statsdoc.Memory

func readMemStats() memStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	n := int(min(ms.NumGC, uint32(len(ms.PauseNs))))
	pauses := make([]uint64, n)
	copy(pauses, ms.PauseNs[:n])
	sort.Slice(pauses, func(i, j int) bool { return pauses[i] < pauses[j] })
	pct := func(p float64) uint64 {
		if n == 0 {
			return 0
		}
		i := int(float64(n)*p) - 1
		i = max(0, min(i, n-1))
		return pauses[i] / 1000
	}
	return memStats{
		HeapObjects:       ms.HeapObjects,
		HeapIdleBytes:     ms.HeapIdle,
		HeapInUseBytes:    ms.HeapInuse,
		HeapReleasedBytes: ms.HeapReleased,
		GCPauseUsec100:    pct(1.0),
		GCPauseUsec99:     pct(0.99),
		GCPauseUsec95:     pct(0.95),
		NextGCBytes:       ms.NextGC,
		GCTotalRuns:       ms.NumGC,
	}
}

// formatTextStats renders /stats in NSQ's human format.
func formatTextStats(health string, start time.Time, topics []TopicStats, producers []ClientStats, mem *memStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nsqd v%s (built w/%s)\n", versionString(), runtime.Version())
	fmt.Fprintf(&b, "start_time %s\n", start.Format(time.RFC3339))
	fmt.Fprintf(&b, "uptime %s\n", time.Since(start))
	fmt.Fprintf(&b, "\nHealth: %s\n", health)
	if mem != nil {
		b.WriteString("\nMemory:\n")
		for _, kv := range []struct {
			k string
			v uint64
		}{
			{"heap_objects", mem.HeapObjects},
			{"heap_idle_bytes", mem.HeapIdleBytes},
			{"heap_in_use_bytes", mem.HeapInUseBytes},
			{"heap_released_bytes", mem.HeapReleasedBytes},
			{"gc_pause_usec_100", mem.GCPauseUsec100},
			{"gc_pause_usec_99", mem.GCPauseUsec99},
			{"gc_pause_usec_95", mem.GCPauseUsec95},
			{"next_gc_bytes", mem.NextGCBytes},
			{"gc_total_runs", uint64(mem.GCTotalRuns)},
		} {
			fmt.Fprintf(&b, "   %-25s\t%d\n", kv.k, kv.v)
		}
	}
	if len(topics) == 0 {
		b.WriteString("\nTopics: None\n")
	} else {
		b.WriteString("\nTopics:")
	}
	for _, t := range topics {
		prefix := "   "
		if t.Paused {
			prefix = "*P "
		}
		fmt.Fprintf(&b, "\n%s[%-15s] depth: %-5d be-depth: %-5d msgs: %-8d e2e%%: %s\n",
			prefix, t.TopicName, t.Depth, t.BackendDepth, t.MessageCount, e2eText(t.E2eProcessingLatency))
		if pt := topicPolicyText(t.Policy); pt != "" {
			fmt.Fprintf(&b, "      policy: %s  dropped: %d expired: %d\n", pt, t.DroppedCount, t.ExpiredCount)
		}
		for _, c := range t.Channels {
			prefix := "      "
			if c.Paused {
				prefix = "   *P "
			}
			fmt.Fprintf(&b, "%s[%-25s] depth: %-5d be-depth: %-5d inflt: %-4d def: %-4d re-q: %-5d timeout: %-5d msgs: %-8d e2e%%: %s\n",
				prefix, c.ChannelName, c.Depth, c.BackendDepth, c.InFlightCount, c.DeferredCount,
				c.RequeueCount, c.TimeoutCount, c.MessageCount, e2eText(c.E2eProcessingLatency))
			if pt := channelPolicyText(c.Policy); pt != "" {
				fmt.Fprintf(&b, "         policy: %s  dropped: %d expired: %d dead-lettered: %d\n",
					pt, c.DroppedCount, c.ExpiredCount, c.DeadLetterCount)
			}
			for _, cl := range c.Clients {
				fmt.Fprintf(&b, "        %s\n", clientText(cl))
			}
		}
	}
	if len(producers) == 0 {
		b.WriteString("\nProducers: None\n")
	} else {
		b.WriteString("\nProducers:\n")
		for _, cl := range producers {
			fmt.Fprintf(&b, "   %s\n", clientText(cl))
		}
	}
	return b.String()
}

// e2eText is NSQ's rendering of a latency result: "99.00%=1.2ms, ...".
func e2eText(r *quantile.Result) string {
	if r == nil {
		return ""
	}
	parts := make([]string, 0, len(r.Percentiles))
	for _, p := range r.Percentiles {
		parts = append(parts, fmt.Sprintf("%.2f%%=%s", p["quantile"]*100, time.Duration(p["value"])))
	}
	return strings.Join(parts, ", ")
}

// clientText is NSQ's one-line rendering of a client: a producer shows
// what it published, a consumer its delivery counters.
func clientText(s ClientStats) string {
	d := time.Since(time.Unix(s.ConnectTime, 0)).Truncate(time.Second)
	_, port, _ := net.SplitHostPort(s.RemoteAddress)
	id := fmt.Sprintf("%s:%s %s", s.Hostname, port, s.UserAgent)
	if len(s.PubCounts) > 0 {
		var total uint64
		topics := make([]string, 0, len(s.PubCounts))
		for _, pc := range s.PubCounts {
			total += pc.Count
			topics = append(topics, fmt.Sprintf("%s=%d", pc.Topic, pc.Count))
		}
		return fmt.Sprintf("[%s %-21s] msgs: %-8d topics: %s connected: %s",
			s.Version, id, total, strings.Join(topics, ","), d)
	}
	return fmt.Sprintf("[%s %-21s] state: %d inflt: %-4d rdy: %-4d fin: %-8d re-q: %-8d msgs: %-8d connected: %s",
		s.Version, id, s.State, s.InFlightCount, s.ReadyCount, s.FinishCount, s.RequeueCount, s.MessageCount, d)
}
