// Command nsq_to_file archives topics to files: NSQ's filename format,
// rotation by size and interval, gzip, topic discovery through nsqlookupd.
// Files are written in --work-dir and moved into --output-dir only when
// complete, and a message is FIN'd only once it is written and synced.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/toolutil"
)

var cmd = toolutil.Command{
	Name:     "nsq_to_file",
	Synopsis: "(--topic=<topic> | --topic-pattern=<regexp> --lookupd-http-address=<addr>) [flags]",
	Doc: "Writes every message of each topic as one line to files named by --filename-format.\n" +
		"Files are written in --work-dir and moved into --output-dir when complete (rotation,\n" +
		"shutdown); set --work-dir to keep partial files out of --output-dir. Messages are FIN'd\n" +
		"only after they are synced to disk, every --sync-interval or when --max-in-flight are\n" +
		"pending. SIGINT/SIGTERM drains in-flight messages and closes every file.",
}

func main() { toolutil.Main(cmd.Name, run) }

type options struct {
	logLevel       string
	logPrefix      string
	channel        string
	maxInFlight    int
	outputDir      string
	workDir        string
	topics         toolutil.StringArray
	topicPattern   string
	topicRefresh   time.Duration
	filenameFormat string
	datetimeFormat string
	hostIdentifier string
	gzip           bool
	gzipLevel      int
	skipEmptyFiles bool
	rotateSize     int64
	rotateInterval time.Duration
	syncInterval   time.Duration
	statusEvery    int
	http           toolutil.HTTPTimeoutFlags
	src            toolutil.SourceFlags

	pattern *regexp.Regexp // compiled topicPattern
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg := nsq.NewConfig()
	o := &options{}
	fs := cmd.FlagSet()
	fs.StringVar(&o.logLevel, "log-level", "info", "set log verbosity: debug, info, warn, error, or fatal")
	fs.StringVar(&o.logPrefix, "log-prefix", "[nsq_to_file] ", "log message prefix")
	fs.StringVar(&o.channel, "channel", "nsq_to_file", "nsq channel")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 200, "max number of messages to allow in flight (and to batch per sync)")
	fs.StringVar(&o.outputDir, "output-dir", "/tmp", "directory to write output files to")
	fs.StringVar(&o.workDir, "work-dir", "", "directory for in-progress files before moving to output-dir (default output-dir)")
	fs.Var(&o.topics, "topic", "nsq `topic` (may be given multiple times)")
	fs.StringVar(&o.topicPattern, "topic-pattern", "", "only log topics matching the following `regexp` (discovered through --lookupd-http-address)")
	fs.DurationVar(&o.topicRefresh, "topic-refresh", time.Minute, "how frequently the topic list should be refreshed")
	fs.StringVar(&o.filenameFormat, "filename-format", "<TOPIC>.<HOST><REV>.<DATETIME>.log", "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. <REV> is increased when file already exists)")
	fs.StringVar(&o.datetimeFormat, "datetime-format", "%Y-%m-%d_%H", "strftime compatible format for <DATETIME> in filename format (%Y %y %m %d %H %M %S %j %%)")
	fs.StringVar(&o.hostIdentifier, "host-identifier", "", "value to output in log filename in place of hostname. <SHORT_HOST> and <HOSTNAME> are valid replacement tokens")
	fs.BoolVar(&o.gzip, "gzip", false, "gzip output files")
	fs.IntVar(&o.gzipLevel, "gzip-level", 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)")
	fs.BoolVar(&o.skipEmptyFiles, "skip-empty-files", false, "skip writing empty files")
	fs.Int64Var(&o.rotateSize, "rotate-size", 0, "rotate the file when it grows bigger than `rotate-size` bytes (uncompressed)")
	fs.DurationVar(&o.rotateInterval, "rotate-interval", 0, "rotate the file every duration")
	fs.DurationVar(&o.syncInterval, "sync-interval", 30*time.Second, "sync file to disk (and FIN the synced messages) every duration")
	fs.IntVar(&o.statusEvery, "status-every", 0, "the # of messages between logging status (per topic), 0 disables")
	o.http.Define(fs, 2*time.Second, 5*time.Second)
	o.src.Define(fs)
	toolutil.ConsumerOptFlag(fs, cfg)
	if err := cmd.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	level, err := toolutil.ParseLevel(o.logLevel)
	if err != nil {
		return err
	}
	log := toolutil.NewLogger(stderr, o.logPrefix, level)
	cfg.UserAgent = toolutil.UserAgent(cmd.Name)
	cfg.MaxInFlight = o.maxInFlight
	if err := cfg.Validate(); err != nil {
		return toolutil.Usagef("--consumer-opt: %v", err)
	}
	for _, dir := range []string{o.outputDir, o.workDir} {
		if err := os.MkdirAll(dir, 0o770); err != nil {
			return err
		}
	}
	d := &discoverer{opts: o, cfg: cfg, log: log, client: o.http.Client(len(o.src.LookupdHTTPAddrs))}
	return d.run(ctx)
}

func (o *options) validate() error {
	if o.maxInFlight <= 0 {
		return toolutil.Usagef("--max-in-flight must be > 0")
	}
	if err := o.src.Validate(); err != nil {
		return err
	}
	if len(o.topics) == 0 && o.topicPattern == "" {
		return toolutil.Usagef("--topic or --topic-pattern required")
	}
	if len(o.topics) == 0 && len(o.src.LookupdHTTPAddrs) == 0 {
		return toolutil.Usagef("--lookupd-http-address must be specified when no --topic specified")
	}
	for _, t := range o.topics {
		if !names.Valid(t) {
			return toolutil.Usagef("--topic %q is not a valid topic name", t)
		}
	}
	if !names.Valid(o.channel) {
		return toolutil.Usagef("--channel %q is not a valid channel name", o.channel)
	}
	if o.topicPattern != "" {
		p, err := regexp.Compile(o.topicPattern)
		if err != nil {
			return toolutil.Usagef("invalid --topic-pattern: %v", err)
		}
		o.pattern = p
	}
	if o.workDir == "" {
		o.workDir = o.outputDir
	}
	switch {
	case o.gzipLevel < 1 || o.gzipLevel > 9:
		return toolutil.Usagef("invalid --gzip-level %d (want 1-9)", o.gzipLevel)
	case o.syncInterval <= 0:
		return toolutil.Usagef("--sync-interval must be positive")
	case o.topicRefresh <= 0:
		return toolutil.Usagef("--topic-refresh must be positive")
	case o.rotateSize < 0 || o.rotateInterval < 0:
		return toolutil.Usagef("--rotate-size and --rotate-interval must not be negative")
	case o.statusEvery < 0:
		return toolutil.Usagef("--status-every must not be negative")
	}
	if filepath.Clean(o.workDir) == filepath.Clean(o.outputDir) {
		o.workDir = o.outputDir
	}
	if _, err := o.filenameTemplate("t"); err != nil {
		return err
	}
	return o.http.Validate()
}

// filenameTemplate computes the format for topic: <TOPIC>, <HOST> and
// <PID> replaced, <REV> kept only when files can collide (gzip, rotation,
// or a separate work dir), ".gz" appended for gzip.
func (o *options) filenameTemplate(topic string) (string, error) {
	hostname, err := os.Hostname()
	if err != nil {
		return "", err
	}
	short, _, _ := strings.Cut(hostname, ".")
	identifier := short
	if o.hostIdentifier != "" {
		identifier = strings.ReplaceAll(o.hostIdentifier, "<SHORT_HOST>", short)
		identifier = strings.ReplaceAll(identifier, "<HOSTNAME>", hostname)
	}
	f := o.filenameFormat
	if o.gzip || o.rotateSize > 0 || o.rotateInterval > 0 || o.workDir != o.outputDir {
		if !strings.Contains(f, "<REV>") {
			return "", toolutil.Usagef("missing <REV> in --filename-format when gzip, rotation, or work dir enabled")
		}
	} else {
		f = strings.ReplaceAll(f, "<REV>", "")
	}
	f = strings.ReplaceAll(f, "<TOPIC>", topic)
	f = strings.ReplaceAll(f, "<HOST>", identifier)
	f = strings.ReplaceAll(f, "<PID>", strconv.Itoa(os.Getpid()))
	if o.gzip && !strings.HasSuffix(f, ".gz") {
		f += ".gz"
	}
	return f, nil
}

func (o *options) namer(topic string) (*namer, error) {
	f, err := o.filenameTemplate(topic)
	if err != nil {
		return nil, err
	}
	if f == "" {
		return nil, fmt.Errorf("empty file name for topic %s", topic)
	}
	return &namer{format: f, datetimeFormat: o.datetimeFormat, workDir: o.workDir, outputDir: o.outputDir}, nil
}
