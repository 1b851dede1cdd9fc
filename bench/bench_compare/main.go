// Command bench_compare runs the same workloads against NSQ v1.3.0's nsqd
// and ours, started in turn (A B A B …), and prints per scenario and metric
// the median and range of each and the ratio ours / NSQ's.
//
// Each run starts the daemon afresh (temp data dir, ephemeral ports on
// 127.0.0.1) and drives it with the same client code, raw protocol V2 and
// HTTP (pubsub-gonsq and latency use go-nsq). Throughput is messages over wall time; CPU per message is the
// daemon's utime+stime from /proc/<pid>/stat over the same window divided
// by the messages, and syscalls per message its read and write system
// calls (syscr + syscw of /proc/<pid>/io) over it, a count that a busy
// machine changes much less than CPU time; peak RSS is VmHWM from /proc/<pid>/status. Every
// scenario checks that exactly the messages published arrived: a mismatch
// ends the run with an error.
//
// Scenarios (--scenarios, comma separated; latency and spread run only
// when named):
//
//	pubsub  --pub-conns connections MPUB 200 × 200 B for --pub-duration
//	        (--mem-queue-size=1000000), then --sub-conns readers with
//	        RDY 2500 consume everything; PUB and SUB reported apart
//	pubsub-gonsq  pubsub's workload driven by go-nsq v1.1.0, the client
//	        most users run: --pub-conns Producers MultiPublish 200 × 200 B,
//	        one in flight each, then --sub-conns Consumers with
//	        max_in_flight 2500 and go-nsq's other defaults FIN each message
//	disk    the same with --mem-queue-size=0
//	replicated  disk's workload on a topic with replicas=3 on three nodes of
//	        this machine, publishers and readers on the leader, CPU and peak
//	        RSS summed over the three; a daemon without --cluster-address
//	        (NSQ) runs disk instead
//	fanout  1 topic × --fanout-channels channels (created over HTTP), one
//	        consumer connection per channel (RDY 100), --fanout-msgs × 100 B
//	        published; delivered messages per second
//	route   fanout's topic and channels with no consumer, --route-msgs ×
//	        100 B published: channel-messages routed per second until every
//	        channel holds them all, and settled RSS per held channel-message
//	burt    --burt-topics topics, --burt-publishers publishers each sending
//	        MPUB 10 × 500 B to the topics in turn and waiting for every OK,
//	        --burt-consumers consumers (RDY 100) spread over the topics,
//	        --mem-queue-size=0, for --burt-duration; end to end
//	spread  how the messages of one MPUB are shared among a channel's
//	        consumers: 5 consumers (RDY 100), 4 publishers MPUB 10 × 500 B
//	        for --spread-duration, with the memory queue and with
//	        --mem-queue-size=0; the share of MPUBs that went to one
//	        consumer, that reached all five, and the consumers an MPUB
//	        reached on average (a behaviour, not a speed; runs only when
//	        named)
//	stats   GET /stats?format=json with --stats-topics × --stats-channels
//	        channels, and with 1 topic × --stats-wide-channels (median of
//	        --stats-requests requests, and the daemon's CPU per request)
//	idle    RSS added per idle topic and per idle channel (--idle-count of
//	        each, default flags)
//	latency end-to-end latency as the OpenMessaging Benchmark measures it:
//	        --latency-producers connections PUB single 100 B messages on a
//	        fixed schedule at each of --latency-rates (msg/s, in all) for
//	        --latency-warmup, then --latency-duration measured;
//	        --latency-consumers go-nsq v1.1.0 consumers with go-nsq's
//	        defaults (output_buffer_timeout 250 ms, output_buffer_size
//	        16 KB) and max_in_flight --latency-rdy, one connection each, FIN
//	        on receipt. Latency counts from when a message was due to be
//	        sent, so a late send is not hidden (coordinated omission); the
//	        lateness is reported apart (publish delay), and so is the p99
//	        counted from the write. p50, p99, p99.9 and max from an
//	        HdrHistogram; with the memory queue (default flags) and with
//	        --mem-queue-size=0, each on a fresh daemon
//
// With --profile=DIR our daemon alone is run and profiled: a CPU profile of
// --profile-seconds at the start of every measured phase and the
// allocation profile at the end of every run, kept as `go tool pprof -top`
// text in DIR. --client-profile=DIR profiles this process instead, the
// client of both daemons, over every measured window (the last round's
// profile of each is kept). pubsub and disk also report this client's own
// CPU per message (getrusage): on two shared cores a rate can be bound by
// the client rather than by the daemon.
//
// Usage:
//
//	bench_compare --ours=./build --nsq=$(scripts/nsq-reference.sh) \
//	    [--rounds=5] [--scenarios=pubsub,pubsub-gonsq,disk,replicated,fanout,burt,stats,idle,latency]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is every knob of a run; the defaults are the workloads.
type config struct {
	oursDir, nsqDir string   // folders holding an nsqd binary; nsqDir empty = ours only
	oursFlags       []string // more flags for our nsqd in every scenario
	nsqName         string   // the reference's column name
	rounds          int
	scenarios       []string

	pubConns, subConns int
	pubDuration        time.Duration

	fanoutChannels, fanoutMsgs, routeMsgs int

	burtTopics, burtPublishers, burtConsumers int
	burtDuration                              time.Duration
	spreadDuration                            time.Duration

	statsTopics, statsChannelsPerTopic, statsWideChannels, statsRequests int

	latencyRates                                   []int
	latencyProducers, latencyConsumers, latencyRDY int
	latencyWarmup, latencyDuration                 time.Duration

	idleCount   int
	httpWorkers int
	stall       time.Duration // no progress for this long fails a scenario

	profileDir     string
	profileRawDir  string // keep the binary profiles here (default: a temp dir, removed)
	profileSeconds int

	clientProfileDir string // CPU profiles of this process (the client) per measured window
}

func defaultConfig() config {
	return config{
		nsqName:               "NSQ v1.3.0",
		rounds:                5,
		scenarios:             defaultScenarios(),
		pubConns:              2,
		subConns:              2,
		pubDuration:           5 * time.Second,
		fanoutChannels:        1000,
		fanoutMsgs:            2000,
		routeMsgs:             5000,
		burtTopics:            24,
		burtPublishers:        4,
		burtConsumers:         120,
		burtDuration:          5 * time.Second,
		spreadDuration:        2 * time.Second,
		statsTopics:           2000,
		statsChannelsPerTopic: 2,
		statsWideChannels:     10000,
		statsRequests:         5,
		latencyRates:          []int{1000, 10000, 50000},
		latencyProducers:      4,
		latencyConsumers:      4,
		latencyRDY:            100,
		latencyWarmup:         2 * time.Second,
		latencyDuration:       10 * time.Second,
		idleCount:             1000,
		httpWorkers:           8,
		stall:                 30 * time.Second,
		profileSeconds:        3,
	}
}

func scenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}

// defaultScenarios are the scenarios run when --scenarios is not given:
// all but the optional ones.
func defaultScenarios() []string {
	var names []string
	for _, s := range scenarios {
		if !s.optional {
			names = append(names, s.name)
		}
	}
	return names
}

func main() {
	log.SetPrefix("[bench_compare] ")
	log.SetFlags(0)
	cfg := defaultConfig()
	fs := flag.NewFlagSet("bench_compare", flag.ExitOnError)
	bindFlags(fs, &cfg)
	fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, &cfg, os.Stderr)
	if res != nil {
		res.write(os.Stdout)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func bindFlags(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.oursDir, "ours", "./build", "folder holding our nsqd")
	fs.StringVar(&c.nsqDir, "nsq", "", "folder holding NSQ v1.3.0's nsqd (empty: run ours only)")
	fs.Func("ours-flags", "more flags for our nsqd in every scenario, space separated (e.g. \"--delivery-burst=16\")", func(v string) error {
		c.oursFlags = strings.Fields(v)
		return nil
	})
	fs.StringVar(&c.nsqName, "nsq-name", c.nsqName, "column name of the --nsq daemon (to compare two builds of ours, say which)")
	fs.IntVar(&c.rounds, "rounds", c.rounds, "rounds of every scenario")
	fs.Func("scenarios", "comma-separated scenarios (default "+strings.Join(c.scenarios, ",")+"; also latency, spread)", func(s string) error {
		c.scenarios = strings.Split(s, ",")
		return nil
	})
	fs.IntVar(&c.pubConns, "pub-conns", c.pubConns, "pubsub/disk: publishing connections")
	fs.IntVar(&c.subConns, "sub-conns", c.subConns, "pubsub/disk: consuming connections")
	fs.DurationVar(&c.pubDuration, "pub-duration", c.pubDuration, "pubsub/disk: how long to publish")
	fs.IntVar(&c.fanoutChannels, "fanout-channels", c.fanoutChannels, "fanout: channels (and consumer connections)")
	fs.IntVar(&c.fanoutMsgs, "fanout-msgs", c.fanoutMsgs, "fanout: messages published")
	fs.IntVar(&c.routeMsgs, "route-msgs", c.routeMsgs, "route: messages published (each channel holds them all in memory)")
	fs.IntVar(&c.burtTopics, "burt-topics", c.burtTopics, "burt: topics")
	fs.IntVar(&c.burtPublishers, "burt-publishers", c.burtPublishers, "burt: publishing connections")
	fs.IntVar(&c.burtConsumers, "burt-consumers", c.burtConsumers, "burt: consuming connections")
	fs.DurationVar(&c.burtDuration, "burt-duration", c.burtDuration, "burt: how long to publish")
	fs.DurationVar(&c.spreadDuration, "spread-duration", c.spreadDuration, "spread: how long to publish, per queue mode")
	fs.IntVar(&c.statsTopics, "stats-topics", c.statsTopics, "stats: topics of the first shape")
	fs.IntVar(&c.statsChannelsPerTopic, "stats-channels", c.statsChannelsPerTopic, "stats: channels per topic of the first shape")
	fs.IntVar(&c.statsWideChannels, "stats-wide-channels", c.statsWideChannels, "stats: channels of the one-topic shape")
	fs.IntVar(&c.statsRequests, "stats-requests", c.statsRequests, "stats: timed requests per shape")
	fs.Func("latency-rates", "latency: comma-separated publish rates in msg/s (default "+joinInts(c.latencyRates)+")", func(s string) error {
		rates, err := parseInts(s)
		c.latencyRates = rates
		return err
	})
	fs.IntVar(&c.latencyProducers, "latency-producers", c.latencyProducers, "latency: producers (single PUBs on a schedule)")
	fs.IntVar(&c.latencyConsumers, "latency-consumers", c.latencyConsumers, "latency: go-nsq consumers, one connection each")
	fs.IntVar(&c.latencyRDY, "latency-rdy", c.latencyRDY, "latency: max_in_flight (RDY) of each consumer")
	fs.DurationVar(&c.latencyWarmup, "latency-warmup", c.latencyWarmup, "latency: warm-up at each rate before measuring")
	fs.DurationVar(&c.latencyDuration, "latency-duration", c.latencyDuration, "latency: how long each rate is measured")
	fs.IntVar(&c.idleCount, "idle-count", c.idleCount, "idle: topics, then channels, to create")
	fs.IntVar(&c.httpWorkers, "http-workers", c.httpWorkers, "concurrent HTTP requests when creating topics and channels")
	fs.DurationVar(&c.stall, "stall", c.stall, "fail a scenario that makes no progress for this long")
	fs.StringVar(&c.profileDir, "profile", "", "profile our daemon only and write `go tool pprof -top` text here")
	fs.StringVar(&c.profileRawDir, "profile-raw", "", "with --profile: keep the binary profiles here, for pprof -peek/-list")
	fs.IntVar(&c.profileSeconds, "profile-seconds", c.profileSeconds, "length of each CPU profile")
	fs.StringVar(&c.clientProfileDir, "client-profile", "", "write a CPU profile of this client over every measured window here (binary and -top text), for either daemon")
}

func (c *config) validate() error {
	for _, name := range c.scenarios {
		if !slices.Contains(scenarioNames(), name) {
			return fmt.Errorf("unknown scenario %q (have %s)", name, strings.Join(scenarioNames(), ","))
		}
	}
	positive := []int{c.rounds, c.pubConns, c.subConns, c.fanoutChannels, c.fanoutMsgs, c.routeMsgs, c.burtTopics,
		c.burtPublishers, c.burtConsumers, c.statsTopics, c.statsChannelsPerTopic, c.statsWideChannels,
		c.statsRequests, c.idleCount, c.httpWorkers, c.profileSeconds,
		c.latencyProducers, c.latencyConsumers, c.latencyRDY}
	positive = append(positive, c.latencyRates...)
	if slices.Min(positive) <= 0 || c.pubDuration <= 0 || c.burtDuration <= 0 || c.spreadDuration <= 0 || c.stall <= 0 ||
		c.latencyWarmup < 0 || c.latencyDuration <= 0 || len(c.latencyRates) == 0 {
		return errors.New("counts and durations must be positive")
	}
	return nil
}

// contender is one daemon under test, with the flags it gets in every
// scenario besides the scenario's own.
type contender struct {
	name, bin string
	flags     []string
}

// contenders are NSQ's then ours, the order every round runs them in.
func (c *config) contenders() ([]contender, error) {
	var list []contender
	if c.nsqDir != "" && c.profileDir == "" {
		list = append(list, contender{name: c.nsqName, bin: filepath.Join(c.nsqDir, "nsqd")})
	}
	list = append(list, contender{name: "ours", bin: filepath.Join(c.oursDir, "nsqd"), flags: c.oursFlags})
	for _, ct := range list {
		if _, err := os.Stat(ct.bin); err != nil {
			return nil, fmt.Errorf("%s: %w", ct.name, err)
		}
	}
	return list, nil
}

// run runs every round and returns what was measured, also when a
// scenario fails (then with the error). progress gets one line per run.
func run(ctx context.Context, cfg *config, progress io.Writer) (*results, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	contenders, err := cfg.contenders()
	if err != nil {
		return nil, err
	}
	var prof *profiler
	if cfg.profileDir != "" {
		rawDir := cfg.profileRawDir
		if rawDir == "" {
			if rawDir, err = os.MkdirTemp("", "bench_compare-profiles-"); err != nil {
				return nil, err
			}
			defer os.RemoveAll(rawDir)
		} else if err := os.MkdirAll(rawDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return nil, err
		}
		prof = &profiler{outDir: cfg.profileDir, rawDir: rawDir, seconds: cfg.profileSeconds, nodes: topNodes}
	}
	names := make([]string, len(contenders))
	for i, ct := range contenders {
		names[i] = ct.name
	}
	res := newResults(names)
	for round := 1; round <= cfg.rounds; round++ {
		for _, sc := range scenarios {
			if !slices.Contains(cfg.scenarios, sc.name) {
				continue
			}
			for _, ct := range contenders {
				e := &env{cfg: cfg, bin: ct.bin, flags: ct.flags, contender: ct.name, scenario: sc.name, prof: prof, progress: progress}
				samples, err := sc.run(ctx, e)
				if err != nil {
					return res, fmt.Errorf("round %d, %s, %s: %w", round, sc.name, ct.name, err)
				}
				res.add(sc.name, ct.name, samples)
				fmt.Fprintf(progress, "round %d/%d %-6s %-10s %s\n", round, cfg.rounds, sc.name, ct.name, formatSamples(samples))
			}
		}
	}
	return res, nil
}

// parseInts parses a comma-separated list of integers.
func parseInts(s string) ([]int, error) {
	var list []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("not a number: %q", f)
		}
		list = append(list, n)
	}
	return list, nil
}

func joinInts(list []int) string {
	parts := make([]string, len(list))
	for i, n := range list {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func formatSamples(samples []sample) string {
	parts := make([]string, len(samples))
	for i, s := range samples {
		parts[i] = s.metric + " " + formatNum(s.value)
	}
	return strings.Join(parts, ", ")
}
