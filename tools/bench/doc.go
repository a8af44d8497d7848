// Command bench measures what pubsink costs per message against two
// at-least-once connectors of its own, minimal and naive (below,
// "Baselines"), on the real emulators, in one invocation:
//
//	go run ./tools/bench                      # 200,000 messages, 3 rounds, 10 streams
//	go run ./tools/bench -n 60000 -streams 4 -connectors minimal,naive   # the two baselines alone
//	go run ./tools/bench -n 50000 -rounds 5   # quicker, more rounds
//	go run ./tools/bench -profile prof/       # also CPU and alloc profiles of each connector, and its CPU by stage
//	go run ./tools/bench stages -v prof/      # the CPU by stage again, from the profiles in prof/
//	go run ./tools/bench -memory              # 1,000,000-message backlog, defaults: peak RSS
//	go run ./tools/bench -latency             # no backlog, 1,000 msg/s for 20 s: probe latency
//	go run ./tools/bench -connectors exactly_once_json,exactly_once_avro,exactly_once_protobuf -reference exactly_once_json
//	go run ./tools/bench -connectors exactly_once_json,exactly_once_json_each50 -reference exactly_once_json
//	go run ./tools/bench -connectors exactly_once,changes_upsert,changes_delete,changes_upsert_shuffled -reference changes_upsert
//	go run ./tools/bench -connectors exactly_once,exactly_once_ordered_keys10 -n 20000
//
// It starts the Pub/Sub emulator and cbtemulator (internal/testenv/emulator), builds
// the pubsink binary, and for each round drains a fresh backlog of N
// messages (about 200-byte JSON payloads, with an id and an event-time
// attribute) with, in an order that rotates from round to round:
//
//	minimal        the honest baseline: a raw Pub/Sub v2 subscriber that
//	               batches rows into ApplyBulk and acks each message after
//	               its batch was written, with the Google client libraries
//	               alone: no dedupe, no watermark, no dead letter, no metrics
//	               registry, no interceptor; it serves by hand the two series
//	               the bench reads (this binary, re-run as `bench minimal`)
//	naive          minimal plus what it keeps of pubsink to be observed like
//	               it: pubsink's metrics registry (internal/metrics, with the
//	               Go and process collectors) served by internal/server, its
//	               committed counter and commit-latency histogram, and
//	               pubsink's gRPC interceptor counting its Bigtable writes
//	               (`bench naive`)
//	at_least_once  the pubsink binary, mode at_least_once
//	exactly_once   the pubsink binary, mode exactly_once, with a tracking
//	               subscription (the watermark)
//
// and, with -connectors:
//
//	exactly_once_no_tracking  exactly_once without the tracking subscription,
//	               which separates the cost of dedupe from the cost of reading
//	               every message a second time for the watermark
//	exactly_once_shared  exactly_once_no_tracking run by -replicas processes
//	               (default 2) at once on the same subscription and state
//	               table: dedupe in shared mode, where each new key costs a
//	               conditional mutation (CheckAndMutateRow) instead of a
//	               batched write. Each process has its own configuration file,
//	               identical but for http.addr, so each has the streams and the
//	               flow-control budget below: together, -replicas times those.
//	exactly_once_baseline  exactly_once run by the binary given with
//	               -baseline (build an earlier commit with go build -o): a
//	               before/after comparison in the same rounds
//	exactly_once_shared_tracking  exactly_once_shared with the tracking
//	               subscription: one process leads the watermark (reads the
//	               tracking subscription), the others report each message
//	               they finish to it through the state table before the ack.
//	reprocess      `pubsink reprocess --from 30m` of the backlog (the topic is
//	               created with message retention): the pipeline of
//	               exactly_once_no_tracking on a subscription of its own,
//	               seeked back, in a dedupe scope of its own; it ends by
//	               itself 3 s after its last message (its CPU includes the
//	               seek and that idle end)
//	exactly_once_beside_reprocess  exactly_once draining the backlog while
//	               a reprocess of the same backlog runs beside it, started
//	               together on the same emulators and machine: msg/s and
//	               the drain are the live process's alone, CPU the sum of
//	               both; compare its msg/s with exactly_once's
//	               (-reference exactly_once)
//	changes_upsert, changes_delete, changes_insert, changes_replace
//	               exactly_once (with its tracking subscription) whose
//	               mapping is a change mapping (docs/reference.md,
//	               "Changes"): op: set (write_mode upsert), op: delete,
//	               write_mode: insert, write_mode: replace_if_newer. Each
//	               message is its own row's one change, so each row takes
//	               the common path: one CheckAndMutateRow that checks the
//	               row's tombstones and writes (a delete: deletes the row
//	               and leaves its tombstone), not batched. setup creates the
//	               tables' tombstone family as for any change mapping.
//
// # Changes: _shuffled, and what the table holds
//
// A changes_* connector may end in _shuffled (changes_upsert_shuffled): its
// N messages then go to N/10 row keys (row key {attributes.key}, ten
// messages a key, N/10 apart in the backlog, so rarely in flight together),
// and each key's ten event times (the run's start + 0…9 ms) are published in
// a shuffled order (a permutation per key, the same in every run). A change
// older than what its row holds then takes the slow path: the conditional
// mutation finds the newer cell or tombstone, a ReadRow finds what covers
// the row, and nothing more is written (about 7 in 10 messages: a random
// order of ten has 2.93 new maxima on average). The sampled latency needs a
// message's own row: a _shuffled run has none ("-").
//
// After a changes_* run the bench reads the whole table (values stripped)
// instead of counting its rows: a deleted row must hold no data and its
// row tombstone, any other one version per column; with _shuffled, each
// cell must be at its row's newest event time (upsert, replace_if_newer;
// delete: the row tombstone) or earliest (insert). A row that is not
// fails the run.
//
// With a changes_* connector the tables have a column "sink calls/msg":
// the sink's Bigtable calls per committed message, the count of
// pubsink_sink_write_seconds, which each ApplyBulk of plain rows observes
// once (so a plain connector's is its ApplyBulk calls per message, about
// 1/90 while draining) and each call of a change row once (conditional
// mutation, mutation, read). Under the medians, "change rows" splits a
// changes_* connector's calls: CheckAndMutateRow and MutateRow from the sink
// table's pubsink_bigtable_mutations_total{call}, ReadRow the rest; and the
// share of its rows superseded (pubsink_row_operations_total{result=
// "superseded"}: a set that a newer change or a tombstone held, or an
// earlier insert); the mean time of a call (the histogram's sum over its
// count), and the msg/s that MaxChangeCalls calls at once (a process's limit on the
// calls of change rows, sinks/bigtable's MaxChangeCalls) allow at those
// calls per message and that call time: near the measured msg/s, the calls
// in flight bound the connector. Each run's line has the calls too.
//
// # Ordering: _ordered_keysK
//
// A connector (but the baseline and the reprocess ones) may end in
// _ordered_keysK (after _shuffled): its messages carry ordering keys, K of
// them (the row key's index modulo K, so a row's changes share a key),
// published with message ordering, and its subscription orders them
// (source.ordering: true; setup creates it with message ordering). The
// client then hands a key's messages over one at a time, and each is
// committed before the next (the minimal and naive connectors' callback
// waits for its write too): one key's messages go at most one per commit latency. Under
// the medians, "ordering" gives each such connector's msg/s per key and
// its msg/s over the same connector's unordered (the name without
// _ordered_keysK) in the same rounds when that ran. The Pub/Sub emulator
// implements ordering (docs/emulator-ordering.md).
//
// # Payload formats and rows per message
//
// By default every message carries today's ~200-byte JSON payload (-size)
// and pubsink writes it as one column {data}, as minimal and naive do.
// -fields publishes instead the bench's record (testdata/order.avsc and
// order.proto: id, seq, customer, amount, currency, quantity, a note that
// pads its JSON encoding to -size bytes, and a list of items {n, sensor,
// v}), and has pubsink read four of its fields: row key {data.id}, columns
// customer {data.customer}, amount {data.amount}, currency
// {data.currency}. -payload json|avro|protobuf encodes that record as JSON,
// Avro binary (hamba/avro) or Protobuf binary (dynamicpb, from order.proto
// compiled with protocompile); pubsink reads Avro and Protobuf with
// payload: {format, schema: the file in the run directory, message}.
// -elements N gives the record N items (about 35 bytes each as JSON) and
// has pubsink map each: data.items, one row per item: key
// {data.id}#{item.n}, columns sensor {item.sensor} and v {item.v} (four
// placeholders too). -payload (any value, json included) and -elements
// imply -fields; every format renders the same cells.
//
// A connector's name may carry its own: a suffix _json, _avro or _protobuf
// (after _shuffled and _ordered_keysK) sets its format, then _eachN its
// items (exactly_once_avro, exactly_once_json_each50,
// at_least_once_protobuf_each10), and implies -fields for it alone. So formats and row counts are compared in the same
// rounds; each run publishes its own backlog anyway. The minimal and naive
// connectors get the same messages but always write one row of the raw
// payload;
// exactly_once_baseline (an earlier binary) takes one row per message, in
// any format the binary has (exactly_once_baseline_json: with the four
// fields; exactly_once_baseline_avro, _protobuf: the same record in that
// format), so that formats compare with an earlier commit in one run.
//
// With more than one row per message the tables add rows/s and CPU s/M
// rows (CPU per million rows written); for a one-row connector they equal
// msg/s and CPU s/M msg, so the ratio of an each connector's CPU per row to
// a one-row connector's CPU per message is read in the same column.
// -reference K1,K2 prints tables of ratios to those connectors besides the
// ones to minimal and naive. After each run the sink table must hold
// rows/message × N rows; the sampled rows and the latency probes read each
// message's last row.
//
// Each connector is a child process (exactly_once_shared: -replicas of
// them, started together), so its CPU time and peak RSS are its own. All
// get the same streams, the same flow-control budget (1000 messages; the
// minimal and naive connectors keep the client's default of one budget for
// all streams, as a plain subscriber does, where pubsink splits it between
// its streams), the same batching (500 rows, 4 MiB, 20 ms, four ApplyBulk
// calls in flight; pubsink's sink has eight, since in exactly_once a batch
// whose rows wait for their dedupe claims holds one meanwhile), the same row (key = the id attribute, one column with
// the payload, cell timestamp = the event time; unless -fields, -payload,
// -elements or a connector suffix, below, change pubsink's), and are
// scraped the same way (GET /metrics every 250 ms, without gzip: see
// "Baselines"; -scrape-gzip asks for it, as Go's client does by default).
//
// # Baselines
//
// Every ratio table says in its title which connector it is to:
//
//   - "ratios to minimal (the honest baseline: ...)": to the simplest
//     correct at-least-once connector one would write with the Google
//     client libraries (pubsub.NewClient, Subscriber.Receive with
//     NumGoroutines = -streams and MaxOutstandingMessages = 1000, a plain
//     bigtable.NewClient, ApplyBulk, ack after the write, nack on error).
//     It imports nothing of pubsink (minimal.go; it shares naive.go's
//     writer and row, which are the Google clients' alone) and serves
//     one hand-written handler, GET /metrics, with two lines of the
//     Prometheus text: pubsink_messages_committed_total{pipeline="bench"},
//     the messages acked after their write (counted after each ack), and
//     pubsink_bigtable_mutations_total{table="<sink table>",call="mutate_rows"},
//     the rows of each ApplyBulk, counted as the call is made (a call the
//     client retries counts once, where pubsink's interceptor counts a
//     retried request again). A ratio to minimal is the whole of what
//     pubsink costs, its observability included.
//   - "ratios to naive (the bench's naive connector: ...)": to minimal
//     plus pubsink's metrics registry and server (promhttp, which gzips
//     when asked; the Go and process collectors),
//     a commit-latency histogram observed per message and pubsink's gRPC
//     interceptor on its Bigtable connection (internal/metrics), so that it
//     is scraped, and counts its writes, exactly as pubsink is. A ratio to
//     naive is what pubsink adds beyond that observability.
//
// What naive costs more than minimal, in one comparison (-n 60000 -rounds
// 3 -streams 4 -connectors minimal,naive -profile, 2-core shared machine,
// 2026-12-07): CPU s/M naive / minimal 0.988 [0.898–1.122] over the rounds
// (within the rounds' noise), 1.13 in the profiled runs. The profiles put
// the difference in the scrape: naive's promhttp handler took 6.7% of its
// CPU samples (11 of 165, of 10 ms; about 3 ms a scrape), 9 of them in gzip
// (compress/flate, a new compressor each scrape, some 300 KB) and 2 in
// gathering (the Go and process collectors); minimal's handler 1 of 151.
// The interceptor's own code and the histogram's Observe had no sample
// (the interceptor's 9 samples are all in the call it wraps). The scrape
// is a cost per second (about 12 ms of CPU a second at 250 ms), so per
// message it weighs more at a low rate. Since then the bench scrapes
// without gzip: four scrapes a second, where a Prometheus server scrapes
// every 15 to 60 s, made gzip's cost a larger share of a connector's CPU
// than in any deployment, and a larger one for pubsink's registry than for
// minimal's two lines; in the final runs of issue 36 naive / minimal was
// 1.088 [0.986–1.218] (5 rounds). Both run in this binary, whose
// package inits (about 450, some 4 MB of heap and tens of ms) a
// stand-alone connector would not all have: they are in both baselines'
// CPU and RSS.
//
// # What is measured
//
//   - msg/s: commits per second while the backlog drains, between the
//     scrapes (every 250 ms) where 1% and 99% of it had committed, from the
//     connector's own pubsink_messages_committed_total (exactly_once_shared:
//     summed over its processes, each scraped). Start-up and the last 1% are
//     left out; "drain s" is the whole time from exec (of the first process)
//     to the last commit.
//   - CPU s/M: user+system seconds of the child process, its whole life
//     (start-up and shutdown included), per million messages;
//     exactly_once_shared: summed over its processes.
//   - RSS MB: the child's peak resident set (VmHWM, read while it runs;
//     rusage's maxrss would include the bench's own RSS, inherited across
//     exec on Linux); exactly_once_shared: the largest single process's, not
//     the sum.
//   - conditional claims / N (exactly_once_shared only, in each run's line
//     and under the table): pubsink_dedupe_conditional_claims_total summed
//     over the processes, divided by N. About 1 says shared mode was in
//     force once the processes had joined; about 0 would mean each believed
//     itself alone. Joining takes up to a renewal period (2.5 s by
//     default): the first process may start alone on the fast path while
//     the others wait to be acknowledged, so in a drain of a few seconds
//     (small -n) it is well under 1, and the run is mostly one process.
//   - state writes/msg, sink writes/msg: rows mutated in the run's state
//     table and in its sink table, per committed message, from the
//     connector's pubsink_bigtable_mutations_total (every call: the
//     entries of ApplyBulk's MutateRows requests, conditional mutations,
//     single-row writes; counted by the client as each request is sent,
//     so a retried request's rows count again), summed over its processes
//     and read once, after the last commit and before the processes are
//     stopped: the whole run, start-up included, the shutdown's writes
//     not. The state figure includes the dedupe catalog's claims and
//     records and the periodic writes of each process: its membership
//     renewal (every 2.5 s by default) and, with a tracking subscription,
//     the watermark (stored every second while it moves; the leader's
//     lease): a cost per second, not per message, so it weighs more in a
//     short drain (small -n). The naive connector counts its sink writes
//     the same way (its own client, the same interceptors) and writes no
//     state: 0; the minimal connector counts the rows it hands ApplyBulk
//     (a retry not again) and writes no state: 0. A binary that does not
//     export the counter (an earlier -baseline) shows "-". In the ratio
//     tables a column whose reference is 0 (minimal's and naive's state
//     writes) is left out.
//   - shared/one throughput (drains, under the table, when a shared
//     connector ran): the msg/s of exactly_once_shared (its -replicas
//     processes together) over the msg/s of a one-process connector in
//     the same rounds, as a ratio of the medians over the rounds where
//     both ran, [min–max] of the per-round ratios, and each round's:
//     above 1, the processes drained faster together than one alone. The
//     one-process connector is exactly_once_no_tracking (the same pipeline)
//     when it ran, else exactly_once (which also reads the tracking
//     subscription); for exactly_once_shared_tracking, exactly_once.
//   - p50/p99: publish → row in Bigtable, for a sample of about 2,000
//     messages of the backlog: the bench notes when each sampled message's
//     publish call returned, and reads the sampled rows from the sink table
//     every 100 ms until each appears. It is measured outside the
//     connectors, the same way for all, at 100 ms resolution. (The
//     connectors' own pubsink_commit_latency_seconds histograms have 1-2.5-5
//     buckets per decade: too coarse for a p99.) In a backlog drain it is mostly the
//     time a message waits behind the backlog, so it follows throughput.
//
// Every run uses fresh topic, subscriptions and tables (the emulators keep
// state) and deletes them afterwards; after each run the sink table must
// hold exactly N rows times its rows per message (N/10 with _shuffled), or
// the run is reported as failed (with exactly_once_shared too: no key
// written twice across processes). All of a run's
// processes are stopped with SIGTERM at once; one still running a minute
// later gets SIGQUIT (the Go runtime writes every goroutine's stack to its
// log), is killed 10 s after, and fails the run.
//
// The machine is shared and noisy: compare only figures of one invocation.
// The summary gives medians with min–max, and the ratios of the medians
// (with the min–max of the per-round ratios, since a round's runs are close
// in time).
//
// # Memory
//
// -memory drains a backlog of 1,000,000 messages (-n to change) with the
// default pipeline: pubsink exactly_once, no tracking subscription (it is
// optional), every setting at its default (streams too, unless -streams is
// given); -connectors exactly_once adds the tracking subscription. It
// reports the peak RSS, the RSS sampled along the way, and the drain.
//
// The Pub/Sub emulator slows down badly with a deep backlog: measured here,
// 10-15k msg/s from a 200,000-message backlog, but about 400 msg/s from a
// 1,000,000-message backlog on two subscriptions (its JVM then holds about
// 6 KB per message, 12 GB in all with -Xmx14g in JAVA_OPTS; without it, the
// default heap of a quarter of the RAM fills up). A full drain of 1M takes
// tens of minutes; -timeout bounds it.
//
// # Latency
//
// -latency measures latency instead of a drain: publish confirmed → row
// readable, at a steady rate, with no backlog.
//
//	go run ./tools/bench -latency                                   # 1,000 msg/s, 20 s a run, 3 rounds
//	go run ./tools/bench -latency -rate 2000 -duration 60s -rounds 5
//	go run ./tools/bench -latency -duration 10s -rounds 1 -connectors minimal,naive,exactly_once -streams 4
//
// For each round and each connector (the same rotation as above), the
// bench starts the connector on a fresh topic, subscriptions and tables,
// empty, and publishes for -duration (default 20 s) at a steady -rate
// (default 1,000 msg/s, probes included): every 5 ms, what brings the count
// up to the rate times the time since the start, sent within a millisecond
// (no bundling delay to bunch it up). The messages are the backlog's (the
// same payloads, id and event-time attributes), so every connector writes
// their rows the same way.
//
// All along, one probe at a time: the bench publishes a probe message (one
// of those counted in the rate), notes when its publish call's result
// returned (confirmed), then reads the probe's row (its key is the id
// attribute) with ReadRow every 2 ms until it is there. The row is taken
// to have become readable halfway between the starts of the last read that
// missed it and of the read that found it (±1 ms). The probe's latency is
// confirmed → readable; after a random pause of up to the batch delay
// (20 ms), so that the probes do not fall in step with the connectors'
// batches, the next probe is published. Warm-up is left out: the probes
// confirmed before -warmup (default 3 s) after the first probe's row was
// read, which covers the connector's start-up and the few messages
// published before it was reading. A probe's row not readable within 10 s
// fails the run.
//
// After -duration, the bench waits until the connector committed every
// message published (-timeout, default 2 min), stops it, and checks that
// the sink table holds exactly one row per message, as after a drain. Each
// run reports the p50 and p99 of its probes (nearest rank), how many,
// the offered rate (what the bench published per second: the connector
// keeps up with it, so it is not a throughput), and CPU s/M and peak RSS
// measured as above (CPU over the messages published, start-up included:
// with 20,000 messages a run, start-up weighs more than in a drain), and
// the state and sink writes per committed message, read as above once
// every message published was committed. The summary gives their medians
// with min–max, and the ratios to minimal and to naive (each when it ran)
// of CPU, the sink writes, RSS, p50 and p99.
//
// Where pubsink's latency goes: after the summary (of a drain too), each
// pubsink connector's pubsink_stage_seconds by stage (map, dedupe, write,
// commit, report), over its sample of a run's messages (one in 16), read with the writes and
// summed over a shared connector's processes: the mean (exact: the sum
// over the count), p50 and p99 (interpolated within the 1-2.5-5 buckets,
// as PromQL's histogram_quantile does), medians [min–max] over the rounds.
// What a probe's latency has beyond the stages is Pub/Sub's delivery and
// the poll's half period. A binary before the metric shows no stages.
//
// The probes' reads (500 a second) and the publishing load the emulators
// and the bench, not the connectors: they are the same for all. With
// -profile, the profiled runs are latency runs too; -n and -samples do not
// apply, and -memory and -latency do not go together.
//
// # Profiles
//
// -profile DIR runs each connector once more after the rounds, with a CPU
// profile and an alloc profile written to DIR (minimal.cpu.pprof,
// naive.cpu.pprof,
// exactly_once.allocs.pprof, ...; exactly_once_shared.p1.cpu.pprof, ... one
// per process). pubsink is then run in-process by this
// binary (`bench inproc`, the same code path as `pubsink run`: config.Load,
// app.Open, App.Run), since the pubsink binary has no profiling endpoint.
// The profiled runs' figures go to DIR/runs.json (below), and their CPU by
// stage is printed after them.
//
// # Stages
//
// Where each profiled connector's CPU goes, by stage: every sample of its
// CPU profile (a shared connector's processes summed) goes to exactly one
// stage, by its stack. The table gives, per connector and stage, the
// samples, their share, the CPU µs per message that share is of the
// profiled run's CPU s/M (CPU seconds per million messages are CPU µs per
// message), and, when minimal was profiled, those µs over minimal's whole
// CPU per message ("/ minimal total": the stages of exactly_once add up to
// its ratio to minimal), then the total. It is printed after the profiled
// runs, and redone from the files by
//
//	go run ./tools/bench stages [-cpu connector=s/M ...] [-v] DIR
//
// which reads DIR/*.cpu.pprof (a connector's, or its processes'
// .p1.cpu.pprof, .p2...) and DIR/runs.json, written by the profiled runs:
// for each connector its run's cpu_s_per_m (summed over a shared
// connector's processes), messages, cpu_s and processes, and error if it
// failed (its µs are then "-"); a later -profile into the same DIR adds its
// connectors to it. -cpu gives a connector's CPU s/M instead (for a
// directory without runs.json, or a figure printed elsewhere); a connector
// with a profile and no figure has shares and no µs. -v lists, per stage,
// the frames that decided its samples (and the goroutine's root frame, for
// scheduler and runtime, and other): what to read when a stage looks
// wrong.
//
// Rules, tried in this order on the sample's whole stack, leaf to root;
// the first rule with a frame whose function name begins with one of its
// patterns decides (cpuRules in cpustages.go, each with its reason):
//
//  1. goroutine stacks: runtime.shrinkstack, which the GC's stack scan
//     calls: the stacks' cost, not the marking's.
//  2. GC: the background mark workers, the assists (an allocation's
//     assist under dedupe is GC), the sweeper, the scavenger, the sweeping
//     and scavenging an allocation does, the cycle's start and end.
//  3. scheduler and runtime: preemption (gopreempt_m, preemptPark), which
//     enters through the stack check (morestack, newstack) but is the
//     scheduler's.
//  4. goroutine stacks: newstack, copystack, morestack (a stack growing,
//     whoever's goroutine), and internal/warm.Stack (9dd617d, reverted).
//  5. metrics and logs, wherever written: github.com/prometheus (a
//     counter under dedupe is metrics), go.uber.org/zap, net/http (which
//     serves only the scrapes; the collectors they run are metrics too,
//     pubsink_ready's readiness check included, a Bigtable call),
//     internal/server, internal/logging, and the pipeline's sampled stage
//     timing (its stageSampler and lap).
//  6. metrics and logs: the Bigtable interceptor's own code
//     (internal/metrics' bigtableCounter and mutateRowsStream when they
//     are the leafmost frame outside the standard library); the call they
//     wrap is its caller's stage.
//  7. tracking: the tracking subscription's reader, source.(*Puller) and
//     its pull loops (their Pulls, the decoding of their answers, the
//     acks) and watermark.(*Tracker).receive (each message recorded, its
//     event time read). Before watermark and decode.
//  8. decode and map: mapping (with the event time it reads through
//     watermark's EventTime), template; the minimal and naive connectors'
//     newRow.
//  9. watermark: the rest of package watermark (Finished, the estimator's
//     tick, the store and lease, the followers' reports and their
//     batcher).
//  10. dedupe: dedupe and members (claims, the catalog's batched reads and
//     writes with their Bigtable calls, the journal, the conditional
//     claims, membership), and internal/batch's batchers of dedupe's types.
//  11. sink write: sinks/ (the flush and its ApplyBulk), the sink's batcher
//     (Batcher[*item], the only one of a pointer shape), the minimal and
//     naive connectors' writer; and their callbacks' own code, the
//     hand-off of the row to the writer and the wait for it (what
//     pubsink's Sink.Write does).
//  12. dedupe: internal/warm's pool goroutines between calls (the calls
//     themselves are matched above).
//  13. metrics and logs: the rest of internal/metrics.
//  14. pipeline: what remains of package pipeline (Handle, process,
//     finish, the in-flight bookkeeping). Before pull and ack, since the
//     pipeline runs inside the source's callback.
//  15. pull and ack: the Pub/Sub client (streams, scheduler, acks, lease
//     extension, flow control), source (the callback's bookkeeping),
//     app's decodeMessages and pubsubCodec (the StreamingPull responses,
//     decoded by hand), the minimal and naive callbacks (their acks).
//  16. gRPC transport: google.golang.org/grpc, reached only by gRPC's own
//     goroutines.
//  17. scheduler and runtime: a goroutine whose root frame is the
//     runtime's (mcall's park_m, schedule and findRunnable with the
//     netpoller and timers, sysmon, the system stack).
//  18. other: the rest (a truncated stack, a library goroutine no rule
//     knows).
//
// So the caller's stage wins over the library's: an ApplyBulk is dedupe
// under dedupe's flush, sink write under the sink's; the runtime under a
// goroutine (a channel operation, an allocation, a copy) is that
// goroutine's stage.
//
// What a stack cannot split:
//
//   - gRPC transport: each connection's reader and writer goroutines
//     (http2Client.reader, loopyWriter) carry the frames of every call on
//     the connection, Pub/Sub's streams and acks and Bigtable's writes
//     alike (the Pub/Sub and Bigtable clients have connections of their
//     own, but the stack does not say whose); their syscalls are theirs.
//     What a call does on its own goroutine (encoding, the stream's
//     set-up) is its caller's stage.
//   - scheduler and runtime, and GC's background work: no message's, and
//     an allocation's share of GC is only its assists.
//   - internal/warm's goroutines between calls: dedupe's, which is right
//     but for a change mapping (changes_*), where the pool at work is
//     mostly the sink's.
//   - the batchers' own goroutines (internal/batch) are told apart by their
//     items' generic shape only (a pointer's is *uint8, which only the
//     sink's batcher has today).
//
// The µs are a share of the whole run's CPU (start-up and shutdown
// included), while a profile covers the run from its start (pubsink's
// after app.Open) to the stop: with runs.json's cpu_s the table says how
// much of the CPU it profiled, and a short run's start-up mix weighs more.
// A profile samples at 100 Hz: a stage of n samples is uncertain by about
// √n of them, so compare stages of tens of samples, not of two.
package main
