// Command bench_channels measures what many channels cost an nsqd: the time
// to create them over HTTP, the memory they hold, and how slow and large
// GET /stats becomes with them.
//
// Steps: force a GC (POST /debug/freememory) and record the Go heap in use
// (from /stats) and, with --nsqd-pid, the process RSS (VmRSS in
// /proc/<pid>/status); create --topics topics (POST /topic/create) and --num
// channels spread round-robin over them (POST /channel/create) with
// --workers concurrent requests; record heap and RSS again; then time
// --stats-runs requests of GET /stats?format=json.
//
// Usage:
//
//	bench_channels [--num=10000] [--topics=1] \
//	    [--nsqd-http-address=127.0.0.1:4151] [--nsqd-pid=PID] \
//	    [--stats-runs=5] [--workers=8] [--topic-prefix=bench_channels_] \
//	    [--cleanup]
//
// Topics are named <topic-prefix><i>, channels ch<j>. Run it against a fresh
// nsqd: channels that already exist cost nothing and skew the per-channel
// figures (it warns when the topics exist). --cleanup deletes the topics
// (and so their channels) at the end.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	num         = flag.Int("num", 10000, "number of channels to create")
	numTopics   = flag.Int("topics", 1, "number of topics to spread the channels over")
	httpAddress = flag.String("nsqd-http-address", "127.0.0.1:4151", "<addr>:<port> of nsqd's HTTP API")
	pid         = flag.Int("nsqd-pid", 0, "pid of nsqd, to read its RSS from /proc/<pid>/status (optional)")
	statsRuns   = flag.Int("stats-runs", 5, "number of timed GET /stats?format=json requests")
	workers     = flag.Int("workers", 8, "concurrent HTTP requests while creating")
	topicPrefix = flag.String("topic-prefix", "bench_channels_", "prefix of the topic names")
	cleanup     = flag.Bool("cleanup", false, "delete the created topics at the end")
)

var client *http.Client

func main() {
	flag.Parse()
	log.SetPrefix("[bench_channels] ")
	log.SetFlags(0)
	if *num <= 0 || *numTopics <= 0 || *statsRuns <= 0 || *workers <= 0 {
		log.Fatal("--num, --topics, --stats-runs and --workers must be positive")
	}
	client = &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        *workers + 1,
			MaxIdleConnsPerHost: *workers + 1,
			DisableCompression:  true,
		},
	}
	base := "http://" + *httpAddress

	if err := ping(base); err != nil {
		log.Fatalf("nsqd not reachable at %s: %s", *httpAddress, err)
	}
	topics := make([]string, *numTopics)
	for i := range topics {
		topics[i] = *topicPrefix + strconv.Itoa(i)
	}

	before, err := measure(base)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range topics {
		if before.topics[t] {
			log.Printf("warning: topic %s already exists; per-channel figures will be skewed", t)
			break
		}
	}

	// Topics first (cheap, few), then the channels.
	start := time.Now()
	if err := run(len(topics), func(i int) error {
		return post(base, "/topic/create", url.Values{"topic": {topics[i]}})
	}); err != nil {
		log.Fatalf("creating topics: %s", err)
	}
	topicTime := time.Since(start)
	start = time.Now()
	if err := run(*num, func(i int) error {
		return post(base, "/channel/create", url.Values{
			"topic":   {topics[i%len(topics)]},
			"channel": {"ch" + strconv.Itoa(i)},
		})
	}); err != nil {
		log.Fatalf("creating channels: %s", err)
	}
	createTime := time.Since(start)

	after, err := measure(base)
	if err != nil {
		log.Fatal(err)
	}

	var (
		lat      []time.Duration
		respSize int
	)
	for i := 0; i < *statsRuns; i++ {
		d, n, err := timeStats(base)
		if err != nil {
			log.Fatalf("GET /stats: %s", err)
		}
		lat = append(lat, d)
		respSize = n
	}
	slices.Sort(lat)

	n := float64(*num)
	fmt.Printf("channels created: %d over %d topic(s) (%d channels now in nsqd, was %d)\n",
		*num, len(topics), after.channels, before.channels)
	fmt.Printf("creation time: %s for channels (%.1f us/channel, %.0f/s, %d workers); topics %s\n",
		round(createTime), float64(createTime.Microseconds())/n, n/createTime.Seconds(),
		*workers, round(topicTime))
	if before.rss > 0 && after.rss > 0 {
		fmt.Printf("rss: %s -> %s, delta %s/channel\n",
			bytesStr(float64(before.rss)), bytesStr(float64(after.rss)),
			bytesStr(float64(after.rss-before.rss)/n))
	} else {
		fmt.Printf("rss: n/a (pass --nsqd-pid)\n")
	}
	if before.heapInUse > 0 && after.heapInUse > 0 {
		fmt.Printf("go heap in use: %s -> %s, delta %s/channel\n",
			bytesStr(float64(before.heapInUse)), bytesStr(float64(after.heapInUse)),
			bytesStr(float64(after.heapInUse-before.heapInUse)/n))
	}
	if before.goroutines > 0 && after.goroutines > 0 {
		fmt.Printf("goroutines: %d -> %d, %.2f/channel\n",
			before.goroutines, after.goroutines, float64(after.goroutines-before.goroutines)/n)
	}
	fmt.Printf("/stats?format=json latency: median %s, max %s over %d runs\n",
		round(lat[len(lat)/2]), round(lat[len(lat)-1]), len(lat))
	fmt.Printf("/stats?format=json response size: %s (%d bytes)\n", bytesStr(float64(respSize)), respSize)

	if *cleanup {
		start := time.Now()
		if err := run(len(topics), func(i int) error {
			return post(base, "/topic/delete", url.Values{"topic": {topics[i]}})
		}); err != nil {
			log.Fatalf("deleting topics: %s", err)
		}
		fmt.Printf("cleanup: deleted %d topic(s) in %s\n", len(topics), round(time.Since(start)))
	}
}

// run calls fn(0..n-1) from --workers goroutines and returns the first error
// (remaining work is skipped once one fails).
func run(n int, fn func(i int) error) error {
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	for w := 0; w < min(*workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					failed.Store(true)
					errOnce.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func ping(base string) error {
	resp, err := client.Get(base + "/ping")
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/ping: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func post(base, path string, q url.Values) error {
	resp, err := client.Post(base+path+"?"+q.Encode(), "", nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s?%s: %s %s", path, q.Encode(), resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

type snapshot struct {
	rss        int64 // bytes; 0 if unknown
	heapInUse  int64 // bytes; 0 if unknown
	goroutines int   // 0 if unknown
	channels   int
	topics     map[string]bool
}

// measure forces a GC in nsqd, then reads RSS, the heap and goroutine count.
func measure(base string) (snapshot, error) {
	var s snapshot
	// NSQ v1.3.0 frees memory but answers 500; ours answers 200. Either way
	// the GC ran; a missing endpoint only makes the heap figure noisier.
	if resp, err := client.Post(base+"/debug/freememory", "", nil); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	resp, err := client.Get(base + "/stats?format=json&include_clients=false")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET /stats: %s", resp.Status)
	}
	var st struct {
		Topics []struct {
			TopicName string `json:"topic_name"`
			Channels  []struct {
				ChannelName string `json:"channel_name"`
			} `json:"channels"`
		} `json:"topics"`
		Memory *struct {
			HeapInUseBytes int64 `json:"heap_in_use_bytes"`
		} `json:"memory"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return s, fmt.Errorf("decoding /stats: %w", err)
	}
	s.topics = make(map[string]bool, len(st.Topics))
	for _, t := range st.Topics {
		s.topics[t.TopicName] = true
		s.channels += len(t.Channels)
	}
	if st.Memory != nil {
		s.heapInUse = st.Memory.HeapInUseBytes
	}
	s.goroutines = goroutines(base)
	if *pid > 0 {
		if s.rss, err = readRSS(*pid); err != nil {
			return s, err
		}
	}
	return s, nil
}

// goroutines reads the total from the pprof goroutine profile's first line
// ("goroutine profile: total N"); 0 if unavailable.
func goroutines(base string) int {
	resp, err := client.Get(base + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0
	}
	buf := make([]byte, 128)
	n, _ := io.ReadFull(resp.Body, buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	v, ok := strings.CutPrefix(line, "goroutine profile: total ")
	if !ok {
		return 0
	}
	g, _ := strconv.Atoi(strings.TrimSpace(v))
	return g
}

// readRSS returns VmRSS of pid in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			break
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

// timeStats times one full GET /stats?format=json, body included.
func timeStats(base string) (time.Duration, int, error) {
	start := time.Now()
	resp, err := client.Get(base + "/stats?format=json")
	if err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, errors.New(resp.Status)
	}
	return d, int(n), nil
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func bytesStr(b float64) string {
	neg := ""
	if b < 0 {
		neg, b = "-", -b
	}
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%s%.2f GiB", neg, b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%s%.2f MiB", neg, b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%s%.2f KiB", neg, b/(1<<10))
	}
	return fmt.Sprintf("%s%.0f B", neg, b)
}
