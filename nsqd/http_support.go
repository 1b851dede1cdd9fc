package nsqd

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/version"
)

func hostname() (string, error) { return os.Hostname() }

func versionString() string { return version.Version }

func setBlockProfileRate(rate int) { runtime.SetBlockProfileRate(rate) }

// optionByConfigName finds the Options field whose config key is name: the
// cfg tag, else the flag name with - → _ (the same rule as the config file).
func optionByConfigName(o *Options, name string) (any, bool) {
	v := reflect.ValueOf(o).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := f.Tag.Get("cfg")
		if key == "" {
			flag := f.Tag.Get("flag")
			if flag == "" || flag == "-" {
				continue
			}
			key = strings.ReplaceAll(flag, "-", "_")
		}
		if key == name && key != "-" {
			return v.Field(i).Interface(), true
		}
	}
	return nil, false
}

// memStats is the "memory" object of /stats.
type memStats struct {
	HeapObjects       uint64 `json:"heap_objects"`
	HeapIdleBytes     uint64 `json:"heap_idle_bytes"`
	HeapInUseBytes    uint64 `json:"heap_in_use_bytes"`
	HeapReleasedBytes uint64 `json:"heap_released_bytes"`
	GCPauseUsec100    uint64 `json:"gc_pause_usec_100"`
	GCPauseUsec99     uint64 `json:"gc_pause_usec_99"`
	GCPauseUsec95     uint64 `json:"gc_pause_usec_95"`
	NextGCBytes       uint64 `json:"next_gc_bytes"`
	GCTotalRuns       uint32 `json:"gc_total_runs"`
}

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
func formatTextStats(health string, start time.Time, topics []TopicStats, mem *memStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nsqd v%s (built w/%s)\nstart_time %s\nuptime %s\n\nHealth: %s\n",
		versionString(), runtime.Version(), start.Format(time.RFC3339), time.Since(start).Truncate(time.Second), health)
	if mem != nil {
		fmt.Fprintf(&b, "\nMemory:\n   %-25s\t%d\n   %-25s\t%d\n   %-25s\t%d\n   %-25s\t%d\n   %-25s\t%d\n   %-25s\t%d\n",
			"heap_objects", mem.HeapObjects, "heap_idle_bytes", mem.HeapIdleBytes, "heap_in_use_bytes", mem.HeapInUseBytes,
			"heap_released_bytes", mem.HeapReleasedBytes, "next_gc_bytes", mem.NextGCBytes, "gc_total_runs", mem.GCTotalRuns)
	}
	if len(topics) == 0 {
		b.WriteString("\nTopics: None\n")
		return b.String()
	}
	b.WriteString("\nTopics:")
	for _, t := range topics {
		paused := ""
		if t.Paused {
			paused = " *P "
		}
		fmt.Fprintf(&b, "\n   [%-15s] depth: %-5d be-depth: %-5d msgs: %-8d e2e%%: %s%s\n",
			t.TopicName, t.Depth, t.BackendDepth, t.MessageCount, "", paused)
		for _, c := range t.Channels {
			cp := ""
			if c.Paused {
				cp = " *P "
			}
			fmt.Fprintf(&b, "      [%-25s] depth: %-5d be-depth: %-5d inflt: %-4d def: %-4d re-q: %-5d timeout: %-5d msgs: %-8d e2e%%: %s%s\n",
				c.ChannelName, c.Depth, c.BackendDepth, c.InFlightCount, c.DeferredCount, c.RequeueCount, c.TimeoutCount, c.MessageCount, "", cp)
			for _, cl := range c.Clients {
				fmt.Fprintf(&b, "        [%s %-21s] state: %d inflt: %-4d rdy: %-4d fin: %-8d re-q: %-8d msgs: %-8d connected: %s\n",
					"V2", cl.ClientID, cl.State, cl.InFlightCount, cl.ReadyCount, cl.FinishCount, cl.RequeueCount, cl.MessageCount,
					time.Since(time.Unix(cl.ConnectTime, 0)).Truncate(time.Second))
			}
		}
	}
	return b.String()
}
