package main

// formats.go is the campaign's pipelines of schema'd payloads (doc.go,
// "Payload formats and reprocess"): two pipelines on topics with an Avro
// schema (payload.schema: topic), one BINARY and one JSON, whose schema
// gets a second revision mid-campaign; one with a .proto file, each over a
// repeated field and a second table under when; and a `pubsink reprocess`
// of the Avro BINARY pipeline's middle range with a changed mapping,
// started mid-campaign beside the live replicas. Each pipeline has a topic
// and a workload of its own (a PCG stream of its own: the record workload
// and the fault schedule of a seed are the same with or without it).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/hamba/avro/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pubsink/pubsink/deadletter"
)

// The payload formats of the format pipelines.
const (
	fmtAvroBinary = "avro-binary" // payload.schema: topic; the topic's encoding BINARY
	fmtAvroJSON   = "avro-json"   // payload.schema: topic; the topic's encoding JSON
	fmtProto      = "proto"       // payload.schema: FILE.proto
)

// The format pipelines' shared resources: one Avro schema for both Avro
// topics (its second revision reaches both at once), the .proto file.
const (
	avroSchemaID = "chaos-reading"
	protoFile    = "chaos_order.proto"
	protoMessage = "chaos.Order"
	// reprocessed is the pipeline that the reprocess rewrites.
	reprocessed = "avro_bin"
	// pbBigTotal is the proto pipeline's when: a total of at least it
	// makes a row in its second table.
	pbBigTotal = 500
)

// avroV1 is the Avro schema's first revision; avroV2, committed
// mid-campaign, adds note with a default (null).
const avroV1 = `{"type": "record", "name": "Reading", "namespace": "chaos", "fields": [
  {"name": "n", "type": "long"},
  {"name": "tag", "type": "string"}
]}`

var avroV2 = strings.Replace(avroV1, `"string"}`+"\n]}", `"string"},`+"\n  "+`{"name": "note", "type": ["null", "string"], "default": null}`+"\n]}", 1)

// protoSchema is the proto pipeline's payload.schema.
const protoSchema = `syntax = "proto3";
package chaos;

message Item {
  string sku = 1;
  int64 qty = 2;
}

message Order {
  int64 total = 1;
  repeated Item items = 2;
  string region = 3;
}
`

// formatPipes are the format pipelines of a campaign whose run directory
// is dir: exactly_once, no tracking subscription (no watermark: nothing
// is late), one stream each, a dead-letter file each (nothing valid may
// reach it). The reprocessed one's topic retains messages (setup, or
// createAvroTopics, creates it so), for the reprocess to seek into.
func formatPipes(dir string) []PipeSpec {
	mk := func(name, format, topic, table string, tables ...string) PipeSpec {
		return PipeSpec{Name: name, Mode: modeExactlyOnce, Output: deadletter.KindFile, Format: format, Topic: topic,
			Sub: "chaos-" + strings.ReplaceAll(name, "_", "-") + "-main", Table: table, Tables: append([]string{table}, tables...),
			DLFile: filepath.Join(dir, name+"-dlq.jsonl"), Streams: 1}
	}
	return []PipeSpec{
		mk(reprocessed, fmtAvroBinary, "chaos-avro-bin", "chaos_avb_rows"),
		mk("avro_json", fmtAvroJSON, "chaos-avro-json", "chaos_avj_rows"),
		mk("proto_each", fmtProto, "chaos-proto", "chaos_pb_items", "chaos_pb_big"),
	}
}

// avroNColumn is the n column of the Avro pipelines, and reprocessNColumn
// the reprocess's: the one expression the reprocess changes.
const (
	avroNColumn      = `{data.n}`
	reprocessNColumn = `{= data.n * 10 + 7}`
)

// formatPipeYAML is a format pipeline's entry in config.yaml; with
// reprocess, the reprocess's (the reprocessed pipeline's n column
// changed).
func formatPipeYAML(p PipeSpec, dir string, reprocess bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `  - name: %s
    mode: %s
    source:
      topic: %s
      subscription: %s
      id_attribute: id
      timestamp_attribute: ts
      timestamp_format: auto
      streams: %d
      max_outstanding_messages: 500
`, p.Name, p.Mode, p.Topic, p.Sub, p.Streams)
	if p.Name == reprocessed {
		b.WriteString("      topic_message_retention: 1h\n")
	}
	b.WriteString("    dedupe: {window: 10m}\n")
	switch p.Format {
	case fmtAvroBinary, fmtAvroJSON:
		n := avroNColumn
		if reprocess && p.Name == reprocessed {
			n = reprocessNColumn
		}
		fmt.Fprintf(&b, `    payload: {format: avro, schema: topic}
    sink:
      type: bigtable
      table: %s
      column_family: d
      row_key: "{attributes.id}"
      columns: {n: "%s", tag: "{data.tag}", note: "{= has(data.note) ? data.note : '-'}"}
      timestamp: event_time
      batch: {max_messages: 200, max_bytes: 4MiB, max_delay: 20ms}
`, p.Table, n)
	case fmtProto:
		fmt.Fprintf(&b, `    payload: {format: protobuf, schema: %q, message: %s}
    sink:
      type: bigtable
      column_family: d
      timestamp: event_time
      batch: {max_messages: 200, max_bytes: 4MiB, max_delay: 20ms}
      mappings:
        - table: %s
          each: data.items
          row_key: "{attributes.id}#{item.sku}"
          columns: {qty: "{item.qty}", total: "{data.total}", region: "{data.region}"}
        - table: %s
          when: "data.total >= %d"
          row_key: "{attributes.id}"
          columns: {total: "{data.total}", items: "{= size(data.items)}"}
`, filepath.Join(dir, protoFile), protoMessage, p.Tables[0], p.Tables[1], pbBigTotal)
	}
	fmt.Fprintf(&b, "    dead_letter: {file: %q}\n", p.DLFile)
	return b.String()
}

// fmtPayload is one payload of the format workload: what the Avro or proto
// message carries.
type fmtPayload struct {
	N     int64  // Avro n; proto total
	Tag   string // Avro tag; proto region
	Items []fmtItem
	At    time.Duration // event time, from the base
}

type fmtItem struct {
	SKU string
	Qty int64
}

// FmtKey is one dedupe key of a format pipeline's workload: its payloads
// (the first the original, a second a rival: another payload and event
// time), which third of the workload publishes it, and whether a
// publisher duplicate (the original's bytes again, a new message ID)
// follows.
type FmtKey struct {
	ID       string
	Payloads []fmtPayload
	Phase    int // 0, 1 (the reprocess's range), 2
	Dup      bool
}

// FmtStep is one message of a format pipeline's workload.
type FmtStep struct {
	Key     int // index into FmtPlan.Keys
	Payload int // index into the key's Payloads
	Dup     bool
}

// FmtPlan is the workload of one format pipeline: its keys and their
// messages in publish order, phase by phase.
type FmtPlan struct {
	Pipe  PipeSpec
	Keys  []FmtKey
	Steps []FmtStep
}

// The format workload's shares.
const (
	fmtShareDup   = 0.10
	fmtShareRival = 0.08
)

// fmtWords make the strings varied: escapes, quotes, non-ASCII.
var fmtWords = []string{"alpha", "δέλτα", "数据", "🚀", `quo"te`, `back\slash`, "x"}

// NewFmtPlans makes the workloads of the format pipes: keys keys each,
// from a PCG stream of their own. The reprocessed pipeline's workload has
// rivals only with rivals (the campaign's default, -reprocess-rivals): the
// reprocess must then keep the live pipeline's winner of each key.
func NewFmtPlans(seed uint64, pipes []PipeSpec, keys int, rivals bool) []*FmtPlan {
	r := rand.New(rand.NewPCG(seed, 0x666f726d617473)) // "formats"
	var out []*FmtPlan
	for _, pipe := range pipes {
		p := &FmtPlan{Pipe: pipe}
		mkPayload := func(k int) fmtPayload {
			pl := fmtPayload{N: r.Int64N(1_000_000) - 1000, Tag: fmtWords[r.IntN(len(fmtWords))] + strconv.Itoa(k),
				At: time.Duration(k)*time.Second + time.Duration(r.IntN(1000))*time.Millisecond}
			if pipe.Format == fmtProto {
				pl.N = r.Int64N(1000)
				for i := range r.IntN(5) { // 0 to 4 items, one sku each
					pl.Items = append(pl.Items, fmtItem{SKU: fmt.Sprintf("s%d", i) + fmtWords[r.IntN(len(fmtWords))], Qty: 1 + r.Int64N(50)})
				}
			}
			return pl
		}
		for k := range keys {
			key := FmtKey{ID: fmt.Sprintf("%s-%04d", pipe.Name, k), Phase: min(3*k/keys, 2), Dup: r.Float64() < fmtShareDup}
			key.Payloads = append(key.Payloads, mkPayload(k))
			if (rivals || pipe.Name != reprocessed) && r.Float64() < fmtShareRival {
				rv := mkPayload(k)
				rv.At = key.Payloads[0].At + time.Duration(1+r.IntN(3000))*time.Millisecond
				key.Payloads = append(key.Payloads, rv)
			}
			p.Keys = append(p.Keys, key)
			p.Steps = append(p.Steps, FmtStep{Key: k})
			if key.Dup {
				p.Steps = append(p.Steps, FmtStep{Key: k, Dup: true})
			}
			if len(key.Payloads) > 1 {
				p.Steps = append(p.Steps, FmtStep{Key: k, Payload: 1})
			}
		}
		out = append(out, p)
	}
	return out
}

// Summary says what the plan holds.
func (p *FmtPlan) Summary() string {
	dups, rivals := 0, 0
	for _, k := range p.Keys {
		if k.Dup {
			dups++
		}
		if len(k.Payloads) > 1 {
			rivals++
		}
	}
	return fmt.Sprintf("%s: %d keys (%d with a publisher duplicate, %d with a rival), %d messages", p.Pipe.Name, len(p.Keys), dups, rivals, len(p.Steps))
}

// fmtRow is what a row should hold: column → value, every cell at ts.
type fmtRow struct {
	cols map[string]string
	ts   time.Duration // the event time, from the base
}

// Rows are the rows that payload pl of key k makes: table → row key → row.
// writer is the Avro revision it was written with (1 or 2: revision 2
// carries a note), reprocessed whether the reprocess's mapping made them.
func (p *FmtPlan) Rows(k *FmtKey, pl *fmtPayload, writer int, reprocessed bool) map[string]map[string]fmtRow {
	out := map[string]map[string]fmtRow{}
	for _, t := range p.Pipe.Tables {
		out[t] = map[string]fmtRow{}
	}
	switch p.Pipe.Format {
	case fmtProto:
		for _, it := range pl.Items {
			out[p.Pipe.Tables[0]][k.ID+"#"+it.SKU] = fmtRow{ts: pl.At, cols: map[string]string{
				"qty": strconv.FormatInt(it.Qty, 10), "total": strconv.FormatInt(pl.N, 10), "region": pl.Tag}}
		}
		if pl.N >= pbBigTotal {
			out[p.Pipe.Tables[1]][k.ID] = fmtRow{ts: pl.At, cols: map[string]string{
				"total": strconv.FormatInt(pl.N, 10), "items": strconv.Itoa(len(pl.Items))}}
		}
	default:
		n := pl.N
		if reprocessed {
			n = n*10 + 7
		}
		note := "-"
		if writer == 2 {
			note = avroNote(pl)
		}
		out[p.Pipe.Table][k.ID] = fmtRow{ts: pl.At, cols: map[string]string{"n": strconv.FormatInt(n, 10), "tag": pl.Tag, "note": note}}
	}
	return out
}

// avroNote is the note a revision-2 writer puts in pl.
func avroNote(pl *fmtPayload) string { return "note of " + pl.Tag }

// encode is the message data of payload pl with writer (an Avro revision:
// 1 or 2) in the pipeline's format.
func (p *FmtPlan) encode(pl *fmtPayload, writer int, v1, v2 avro.Schema) ([]byte, error) {
	switch p.Pipe.Format {
	case fmtProto:
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(pl.N))
		for _, it := range pl.Items {
			var ib []byte
			ib = protowire.AppendTag(ib, 1, protowire.BytesType)
			ib = protowire.AppendString(ib, it.SKU)
			ib = protowire.AppendTag(ib, 2, protowire.VarintType)
			ib = protowire.AppendVarint(ib, uint64(it.Qty))
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, ib)
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		return protowire.AppendString(b, pl.Tag), nil
	case fmtAvroJSON:
		m := map[string]any{"n": pl.N, "tag": pl.Tag}
		if writer == 2 {
			m["note"] = map[string]string{"string": avroNote(pl)} // a union's non-null value, wrapped
		}
		return json.Marshal(m)
	default:
		if writer == 2 {
			note := avroNote(pl)
			return avro.Marshal(v2, map[string]any{"n": pl.N, "tag": pl.Tag, "note": &note})
		}
		return avro.Marshal(v1, map[string]any{"n": pl.N, "tag": pl.Tag})
	}
}

// fmtRun is what the campaign fixes and sees of the format workloads at
// run time; the campaign's mu guards it.
type fmtRun struct {
	plans []*FmtPlan
	steps [][]published // by plan, by step
	// writers are the Avro revision each step was written with (1 before
	// the second revision was committed, 2 after), by plan, by step.
	writers [][]int
	base    time.Time // event time of offset 0
	// from and until are the reprocess's range (publish times), chosen in
	// the quiet gaps between the phases; zero until the publisher passed
	// them.
	from, until time.Time
	revision2   time.Time // when the second revision was committed
	rangeDone   chan struct{}
}

// createAvroTopics creates the Avro schema (revision 1) and both Avro
// topics with it, before `pubsink setup` (which makes their
// subscriptions); the reprocessed topic retains messages from its
// creation (the emulator replays nothing published before a topic's
// retention was set).
func (c *campaign) createAvroTopics(ctx context.Context) error {
	var err error
	c.schemas, err = vkit.NewSchemaClient(ctx, option.WithEndpoint(c.ps.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(), option.WithTelemetryDisabled())
	if err != nil {
		return err
	}
	s, err := c.schemas.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{
		Parent: "projects/" + project, SchemaId: avroSchemaID,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV1},
	})
	if err != nil {
		return fmt.Errorf("create the Avro schema: %w", err)
	}
	for _, p := range c.pipes {
		enc, ok := map[string]pubsubpb.Encoding{fmtAvroBinary: pubsubpb.Encoding_BINARY, fmtAvroJSON: pubsubpb.Encoding_JSON}[p.spec.Format]
		if !ok {
			continue
		}
		t := &pubsubpb.Topic{Name: "projects/" + project + "/topics/" + p.spec.Topic,
			SchemaSettings: &pubsubpb.SchemaSettings{Schema: s.Name, Encoding: enc}}
		if p.spec.Name == reprocessed {
			t.MessageRetentionDuration = durationpb.New(time.Hour)
		}
		if _, err := c.pubsub.TopicAdminClient.CreateTopic(ctx, t); err != nil {
			return fmt.Errorf("create topic %s: %w", p.spec.Topic, err)
		}
	}
	return nil
}

// fmtGap is the quiet time between two phases of the format workload: the
// reprocess's range ends are in its middle, so that no message is
// published within fmtGap/2 of either.
const fmtGap = 3 * time.Second

// publishFormats publishes the format workloads over the workload's
// duration: phase 0 over its first 15%, phase 1 (the reprocess's range)
// to 35%, phase 2 the rest, a quiet fmtGap between phases. The range comes
// early so that the reprocess, which ends only after its lock lapsed (a
// SIGKILL) and --idle passed, runs under most of the fault schedule and
// ends about when the workload does. The second Avro
// revision is committed halfway through phase 1, once every message before
// is published; every Avro message after is written with it.
func (c *campaign) publishFormats(ctx context.Context, t0 time.Time) error {
	fr := c.fmt
	v1, err := avro.Parse(avroV1)
	if err != nil {
		return err
	}
	v2, err := avro.Parse(avroV2)
	if err != nil {
		return err
	}
	pubs := make([]*pubsub.Publisher, len(fr.plans))
	for i, p := range fr.plans {
		pubs[i] = c.pubsub.Publisher(p.Pipe.Topic)
		defer pubs[i].Stop()
	}
	var wg sync.WaitGroup
	writer := 1
	// A publisher duplicate is its original's bytes again, written with
	// the original's revision.
	type sent struct {
		data   []byte
		writer int
	}
	originals := map[[3]int]sent{}
	send := func(pi, si int) error {
		p := fr.plans[pi]
		s := p.Steps[si]
		k := &p.Keys[s.Key]
		pl := &k.Payloads[s.Payload]
		m, ok := originals[[3]int{pi, s.Key, s.Payload}]
		if !ok {
			data, err := p.encode(pl, writer, v1, v2)
			if err != nil {
				return err
			}
			m = sent{data, writer}
			originals[[3]int{pi, s.Key, s.Payload}] = m
		}
		data := m.data
		c.mu.Lock()
		fr.steps[pi][si].at = time.Now()
		fr.writers[pi][si] = m.writer
		c.mu.Unlock()
		res := pubs[pi].Publish(ctx, &pubsub.Message{Data: data, Attributes: map[string]string{
			"id": k.ID, "ts": strconv.FormatInt(fr.base.Add(pl.At).UnixMilli(), 10), "p": strconv.Itoa(s.Payload)}})
		wg.Go(func() {
			id, err := res.Get(context.WithoutCancel(ctx))
			c.mu.Lock()
			fr.steps[pi][si].id, fr.steps[pi][si].err = id, err
			c.mu.Unlock()
		})
		return nil
	}
	// Each phase's steps of every plan, interleaved by their place in it.
	type at struct {
		pi, si int
		frac   float64
	}
	phases := [3][]at{}
	for pi, p := range fr.plans {
		var of [3][]int
		for si, s := range p.Steps {
			ph := p.Keys[s.Key].Phase
			of[ph] = append(of[ph], si)
		}
		for ph, sis := range of {
			for j, si := range sis {
				phases[ph] = append(phases[ph], at{pi, si, float64(j) / float64(len(sis))})
			}
		}
	}
	bounds := [4]float64{0, 0.15, 0.35, 1}
	d := c.opts.Duration
	for ph, steps := range phases {
		start := t0.Add(time.Duration(bounds[ph] * float64(d)))
		if ph > 0 {
			start = start.Add(fmtGap / 2)
		}
		span := time.Duration((bounds[ph+1]-bounds[ph])*float64(d)) - fmtGap
		// Sorted by their place in the phase: the plans interleave.
		slices.SortStableFunc(steps, func(a, b at) int { return cmp.Compare(a.frac, b.frac) })
		revAt := -1
		if ph == 1 {
			revAt = len(steps) / 2
		}
		for j, a := range steps {
			if j == revAt {
				wg.Wait()
				if err := c.commitRevision2(ctx); err != nil {
					return err
				}
				writer = 2
			}
			if !sleepUntil(ctx, start.Add(time.Duration(a.frac*float64(span)))) {
				wg.Wait()
				return ctx.Err()
			}
			if err := send(a.pi, a.si); err != nil {
				return err
			}
		}
		if ph < 2 {
			// The middle of the gap after the phase: a range end.
			if !sleepUntil(ctx, t0.Add(time.Duration(bounds[ph+1]*float64(d)))) {
				wg.Wait()
				return ctx.Err()
			}
			c.mu.Lock()
			if ph == 0 {
				fr.from = time.Now()
			} else {
				fr.until = time.Now()
			}
			c.mu.Unlock()
			if ph == 1 {
				close(fr.rangeDone)
			}
		}
		c.logf("format workloads: phase %d published (%d messages)", ph, len(steps))
	}
	wg.Wait()
	return nil
}

// commitRevision2 commits the Avro schema's second revision.
func (c *campaign) commitRevision2(ctx context.Context) error {
	r, err := c.schemas.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{
		Name:   "projects/" + project + "/schemas/" + avroSchemaID,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV2}})
	if err != nil {
		return fmt.Errorf("commit the Avro schema's second revision: %w", err)
	}
	c.mu.Lock()
	c.fmt.revision2 = time.Now()
	c.mu.Unlock()
	c.logf("committed revision %s of the Avro schema (a note with a default)", r.RevisionId)
	return nil
}

// planOf is the index of the plan of format pipeline pipe.
func (fr *fmtRun) planOf(pipe string) int {
	return slices.IndexFunc(fr.plans, func(p *FmtPlan) bool { return p.Pipe.Name == pipe })
}

// readFormatTables reads every table of a format pipeline whole.
func (c *campaign) readFormatTables(ctx context.Context, p PipeSpec) (map[string]map[string]map[string][]cell, error) {
	out := map[string]map[string]map[string][]cell{}
	for _, t := range p.Tables {
		rows, err := c.readRows(ctx, t)
		if err != nil {
			return nil, err
		}
		out[t] = rows
	}
	return out, nil
}

// fmtObserved gathers what the campaign saw of format pipeline i. The
// caller holds c.mu.
func (c *campaign) fmtObserved(i int, tables map[string]map[string]map[string][]cell, leftMain int, final []procCounters, finalOK bool, rpLeft [2]bool) *FmtObserved {
	p := c.pipes[i]
	pi := c.fmt.planOf(p.spec.Name)
	o := &FmtObserved{Plan: c.fmt.plans[pi], Steps: c.fmt.steps[pi], Writers: c.fmt.writers[pi], Base: c.fmt.base, Tables: tables,
		Copies: p.copies, Malformed: p.malformed, LeftMain: leftMain, Final: final, FinalOK: finalOK}
	if p.spec.Name == reprocessed {
		o.Reprocess = &ReprocessObserved{From: c.fmt.from, Until: c.fmt.until, Exits: c.rp.exits, SubLeft: rpLeft[0], LockLeft: rpLeft[1]}
	}
	return o
}

// missingFormats counts the outcomes of format pipeline p not visible
// yet: keys whose rows are not those of one of their payloads (with the
// reprocess's mapping in its range), and a reprocess not done.
func (c *campaign) missingFormats(ctx context.Context, p *pipeState) (int, error) {
	tables, err := c.readFormatTables(ctx, p.spec)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.fmtObserved(slices.Index(c.pipes, p), tables, 0, nil, false, [2]bool{})
	missing := 0
	for ki := range o.Plan.Keys {
		if o.keyProblem(ki) != "" {
			missing++
		}
	}
	if o.Reprocess != nil && !c.rp.done {
		missing++
	}
	return missing, nil
}

// reprocessLeftovers reports whether the reprocess's subscription, and its
// record (the row reprocess#PIPELINE of the state table), are still there.
func (c *campaign) reprocessLeftovers(ctx context.Context) [2]bool {
	var out [2]bool
	p := c.pipes[slices.IndexFunc(c.pipes, func(p *pipeState) bool { return p.spec.Name == reprocessed })]
	_, err := c.pubsub.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{
		Subscription: "projects/" + project + "/subscriptions/" + p.spec.Sub + "-reprocess"})
	out[0] = status.Code(err) != codes.NotFound
	row, err := c.bigtable.Open(stateTable).ReadRow(ctx, "reprocess#"+reprocessed)
	out[1] = err != nil || len(row) > 0
	return out
}
