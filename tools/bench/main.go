package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "minimal":
			os.Exit(runMinimal(os.Args[2:]))
		case "naive":
			os.Exit(runNaive(os.Args[2:]))
		case "inproc":
			os.Exit(runInproc(os.Args[2:]))
		case "stages":
			os.Exit(runStages(os.Args[2:]))
		}
	}
	os.Exit(runBench(os.Args[1:]))
}

// options are the flags of the bench.
type options struct {
	n          int
	rounds     int
	streams    int // 0: the pipeline default (memory mode without -streams)
	connectors []kind
	replicas   int // processes of exactly_once_shared
	size       int
	format     string // -payload
	fields     bool
	elements   int
	shapes     map[kind]shape // of each connector
	references []kind         // more tables of ratios, to these connectors
	memory     bool
	latency    bool          // the latency probe instead of a drain
	rate       float64       // -latency: msg/s published, probes included
	duration   time.Duration // -latency: how long each run publishes
	warmup     time.Duration // -latency: probes left out after the first row
	profileDir string
	logDir     string
	pubsink    string
	baseline   string // the pubsink binary of exactly_once_baseline
	timeout    time.Duration
	samples    int
}

func parseOptions(args []string) (options, error) {
	var o options
	var connectors, references string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 200_000, "messages per run (with -memory: 1,000,000)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every connector once, in a rotating order")
	fs.IntVar(&o.streams, "streams", 10, "StreamingPull streams of every connector (with -memory: the pipeline default)")
	fs.StringVar(&connectors, "connectors", "minimal,naive,at_least_once,exactly_once", "connectors to run, comma-separated: minimal (the honest baseline: the Google client libraries alone), naive (minimal with pubsink's metrics registry, server and Bigtable interceptor), at_least_once, exactly_once; also exactly_once_no_tracking, exactly_once_shared, exactly_once_shared_tracking, exactly_once_baseline, reprocess, exactly_once_beside_reprocess and the change mappings changes_upsert, changes_delete, changes_insert, changes_replace (with -memory: exactly_once_no_tracking, the default pipeline); a name may end in _shuffled (changes_* only: N/10 row keys, event times shuffled), then _ordered_keysK (K ordering keys, an ordered subscription), then _json, _avro or _protobuf (its payload format instead of -payload's) and then _eachN (N items per message instead of -elements'), which imply -fields for it: exactly_once_avro, exactly_once_json_each50, changes_upsert_shuffled, exactly_once_ordered_keys10")
	fs.IntVar(&o.replicas, "replicas", 2, "processes that run exactly_once_shared at once")
	fs.IntVar(&o.size, "size", 200, "payload size in bytes, about (of the JSON encoding, without -elements' items)")
	fs.StringVar(&o.format, "payload", formatJSON, "payload format of the messages: json, avro or protobuf (Avro and Protobuf binary, of testdata/order.avsc and order.proto); given at all, it implies -fields")
	fs.BoolVar(&o.fields, "fields", false, "publish the bench's record (testdata/order.*) and have pubsink read four of its fields ({data.id} key, three {data.…} columns) instead of one column {data}")
	fs.IntVar(&o.elements, "elements", 0, "items per message (implies -fields): pubsink maps each: data.items to one row per item")
	fs.StringVar(&references, "reference", "", "also print ratios to these connectors (comma-separated), besides ratios to minimal and to naive")
	fs.BoolFunc("scrape-gzip", "scrape /metrics with gzip, as Go's HTTP client does by default and the bench did before issue 36 (to measure what that costs the connectors)", func(string) error {
		scrapeClient.Transport = http.DefaultTransport
		return nil
	})
	fs.BoolVar(&o.memory, "memory", false, "memory test: one run of a 1M-message backlog with default settings; report peak RSS")
	fs.BoolVar(&o.latency, "latency", false, "latency probe: no backlog, a steady -rate for -duration, probes one at a time; report publish-confirmed → row-readable latency")
	fs.Float64Var(&o.rate, "rate", 1000, "with -latency: messages per second published, probes included")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "with -latency: how long each run publishes, warm-up included")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "with -latency: probes left out after the first probe's row was read")
	fs.StringVar(&o.profileDir, "profile", "", "after the rounds, run each connector once more with CPU and alloc profiles written to this directory")
	fs.StringVar(&o.logDir, "logs", "", "keep the emulators' and children's logs in this directory (default: a temporary one, removed)")
	fs.StringVar(&o.pubsink, "pubsink", "", "pubsink binary to run (default: built from this module)")
	fs.StringVar(&o.baseline, "baseline", "", "another pubsink binary (an earlier commit's), run as connector exactly_once_baseline: exactly_once, compared in the same rounds")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up on a run after this long (default: 2 min + 2 ms per message; with -latency: on its last commit, 2 min after the publishing ended)")
	fs.IntVar(&o.samples, "samples", 2000, "messages per run whose publish → row latency is measured")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.memory && o.latency {
		return o, fmt.Errorf("-memory and -latency are two modes: pick one")
	}
	if o.latency && (o.rate < 1 || o.duration <= 0 || o.warmup < 0 || o.warmup >= o.duration) {
		return o, fmt.Errorf("-latency: -rate must be at least 1, -duration positive, -warmup not negative and shorter than -duration")
	}
	if o.memory {
		if !set["n"] {
			o.n = 1_000_000
		}
		if !set["streams"] {
			o.streams = 0
		}
		if !set["connectors"] {
			// The default pipeline: exactly_once, no tracking subscription
			// (it is optional), and every other setting at its default.
			connectors = string(exactlyOnceNoTracking)
		}
		if !set["rounds"] {
			o.rounds = 1
		}
	}
	if !slices.Contains(formats, o.format) {
		if _, err := strconv.Atoi(o.format); err == nil {
			return o, fmt.Errorf("-payload is the payload format now (json, avro, protobuf); the size is -size")
		}
		return o, fmt.Errorf("-payload: unknown format %q (json, avro, protobuf)", o.format)
	}
	if o.elements < 0 || o.elements > maxElements {
		return o, fmt.Errorf("-elements: 0 to %d", maxElements)
	}
	if set["payload"] || o.elements > 0 {
		o.fields = true
	}
	o.shapes = map[kind]shape{}
	for _, c := range strings.Split(connectors, ",") {
		k, sh, err := parseConnector(strings.TrimSpace(c), o)
		if err != nil {
			return o, err
		}
		if k.base() == exactlyOnceBaseline && o.baseline == "" {
			return o, fmt.Errorf("-connectors: %s needs -baseline PATH", k)
		}
		if sh.shuffled && o.latency {
			return o, fmt.Errorf("-connectors: %s: _shuffled is for a drain, not -latency (the probes read a message's own row)", k)
		}
		if _, dup := o.shapes[k]; dup {
			return o, fmt.Errorf("-connectors: %s twice", k)
		}
		o.connectors = append(o.connectors, k)
		o.shapes[k] = sh
	}
	if references != "" {
		for _, r := range strings.Split(references, ",") {
			k := kind(strings.TrimSpace(r))
			if !slices.Contains(o.connectors, k) {
				return o, fmt.Errorf("-reference: %s is not one of -connectors", k)
			}
			if k != minimal && k != naive { // their tables are printed anyway
				o.references = append(o.references, k)
			}
		}
	}
	if o.n < 1 || o.rounds < 0 || o.streams < 0 || o.size < 64 || o.samples < 1 || o.replicas < 2 {
		return o, fmt.Errorf("-n, -samples must be positive, -rounds and -streams not negative, -size at least 64, -replicas at least 2")
	}
	switch {
	case o.timeout != 0:
	case o.latency:
		o.timeout = 2 * time.Minute
	default:
		o.timeout = 2*time.Minute + time.Duration(o.n)*2*time.Millisecond
	}
	return o, nil
}

func runBench(args []string) int {
	o, err := parseOptions(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := newBench(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer b.close()
	if o.memory {
		err = b.memory(ctx)
	} else {
		err = b.rounds(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}
