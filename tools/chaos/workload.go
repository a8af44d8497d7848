package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/pubsink/pubsink/deadletter"
)

// Kind is what a record is made to exercise. A record is one logical
// row (one id attribute, one first payload); it is published as one or
// more messages (Variant).
type Kind uint8

const (
	// KindUnique is on time: its event time is its publish time.
	KindUnique Kind = iota
	// KindInBand trails its publication by up to 80% of the estimation
	// band: out of order, but within the watermark's assumption.
	KindInBand
	// KindBigKey has a row key of exactly 4 KiB, the most Bigtable takes.
	KindBigKey
	// KindBigPayload carries a payload of one to three MB.
	KindBigPayload
	// KindRace is published twice at once with two payloads and the same
	// event time: either may win, but the row holds one version of one.
	KindRace
	// KindLate has an event time an hour behind; it is published only once
	// the stored watermark is known, so it is late when it is judged,
	// unless, with replicas, a follower had not read that watermark yet
	// (see lateWritten).
	KindLate
	// KindPre1970 has an event time before 1970, which pubsink refuses
	// when it reads the event time (bad_event_time), before it looks at
	// the watermark or the sink.
	KindPre1970
	// The poison kinds, each dead-lettered with one reason at decode.
	KindInvalidPayload // invalid_payload: not JSON, or not an object
	KindMissingField   // missing_field: the JSON has no usable "n"
	KindMissingID      // missing_field: no id attribute, or an empty one
	KindBadEventTime   // bad_event_time: ts missing or unparsable
	KindTooLarge       // too_large: an id (row key) over 4 KiB
	numKinds
)

var kindNames = [numKinds]string{
	"unique", "in_band", "big_key", "big_payload", "race", "late", "pre_1970",
	"invalid_payload", "missing_field", "missing_id", "bad_event_time", "too_large",
}

func (k Kind) String() string { return kindNames[k] }

// Poison reports whether every message of the kind is dead-lettered.
func (k Kind) Poison() bool { return k >= KindInvalidPayload }

// Valid reports whether the kind must end as exactly one row.
func (k Kind) Valid() bool { return k <= KindRace }

// Reason is the dead-letter reason of a message of the kind: every
// poison kind and KindPre1970 have one, whatever the timing; KindLate has
// late (or no copy at all, if it was written while the watermark was
// unknown: see lateWritten); valid kinds have none ("").
func (k Kind) Reason() deadletter.Reason {
	switch k {
	case KindInvalidPayload:
		return deadletter.InvalidPayload
	case KindMissingField, KindMissingID:
		return deadletter.MissingField
	case KindBadEventTime, KindPre1970:
		return deadletter.BadEventTime
	case KindTooLarge:
		return deadletter.TooLarge
	case KindLate:
		return deadletter.Late
	}
	return ""
}

// Variant is one message of a record.
type Variant uint8

const (
	// VariantOriginal is the record's first message.
	VariantOriginal Variant = iota
	// VariantEcho is the same content (id, ts, payload) republished at
	// once under a new message ID: a redelivery that dedupe must catch
	// even while the original is in flight.
	VariantEcho
	// VariantDup is a new payload with a new event time under the same
	// id, published only once the original's dedupe record is visible in
	// the catalog: it must be acked unwritten, so the first payload stays.
	VariantDup
	// VariantReplay is the same content republished once the original is
	// committed.
	VariantReplay
	// VariantRace is KindRace's second payload with the original's event
	// time, published right after it.
	VariantRace
)

var variantNames = []string{"original", "echo", "dup", "replay", "race"}

func (v Variant) String() string { return variantNames[v] }

// TimeFormat is how a record's ts attribute is written (timestamp_format:
// auto reads both).
type TimeFormat uint8

const (
	TimeMillis  TimeFormat = iota // milliseconds since the epoch
	TimeRFC3339                   // RFC 3339 UTC with microseconds: truncation to ms is exercised
	TimeOffset                    // RFC 3339 with a +02:00 offset and nanoseconds
)

// Record is one logical row of the workload, fixed by the seed. Absolute
// times are not: an on-time event time is taken when the message is
// published, EventLag before it.
type Record struct {
	CID  int // the record's number, carried in the cid attribute
	Kind Kind
	// ID is the id attribute (the dedupe key and row key); "" with NoID.
	ID   string
	NoID bool // KindMissingID: leave the id attribute out, or set it empty (EmptyID)
	// EmptyID sets the id attribute to "" instead of leaving it out.
	EmptyID bool
	Payload []byte
	// Second is the payload of VariantDup and VariantRace.
	Second []byte
	// EventLag is how far the event time trails the publication.
	EventLag time.Duration
	Format   TimeFormat
	// BadTS, with KindBadEventTime, is the ts attribute as sent; NoTS
	// leaves it out.
	BadTS string
	NoTS  bool
}

// Step is one message to publish, in plan order.
type Step struct {
	Rec     int // index into Plan.Records
	Variant Variant
}

// Gated reports whether the step waits for a condition before it is
// published: a dup or replay for its original's commit, a late or
// pre-1970 record for a known watermark (a pre-1970 record is behind it
// too, so its reason shows that bad_event_time is decided before late).
func (s Step) Gated(p *Plan) bool {
	switch s.Variant {
	case VariantDup, VariantReplay:
		return true
	}
	k := p.Records[s.Rec].Kind
	return s.Variant == VariantOriginal && (k == KindLate || k == KindPre1970)
}

// Plan is the workload of one campaign: the same seed and size give the
// same plan.
type Plan struct {
	Records []Record
	Steps   []Step
}

// WorkloadConfig sizes a plan.
type WorkloadConfig struct {
	Messages    int           // total messages, every variant included
	BigPayloads int           // records of KindBigPayload
	LateBursts  int           // bursts of late and pre-1970 records
	Band        time.Duration // the pipeline's estimation_band
}

// The shares of a plan's steps. Poison is split evenly over the five
// poison kinds.
const (
	shareDup    = 0.06
	shareReplay = 0.02
	sharePoison = 0.04
	shareRace   = 0.01
	shareBigKey = 0.002
	shareEcho   = 0.04 // of the valid originals
	shareInBand = 0.15 // of the valid originals
)

// NewPlan makes the plan of seed. It is deterministic: it draws from its
// own PCG stream, so that the fault schedule of the same seed does not
// shift when the size changes.
func NewPlan(seed uint64, wc WorkloadConfig) *Plan {
	r := rand.New(rand.NewPCG(seed, 0x776f726b6c6f6164)) // "workload"
	p := &Plan{}
	n := wc.Messages
	// Positions of the big payloads and of the late bursts, as step
	// counts, spread over the plan (not in its first tenth, so that the
	// watermark exists by the time the late ones come).
	bigAt := positions(r, wc.BigPayloads, n/10, n)
	lateAt := positions(r, wc.LateBursts, n/10, n)
	// committable are valid records a dup or replay may target: unique
	// and in-band originals not yet targeted.
	var committable []int

	add := func(rec Record) int {
		rec.CID = len(p.Records)
		p.Records = append(p.Records, rec)
		return rec.CID
	}
	step := func(rec int, v Variant) { p.Steps = append(p.Steps, Step{Rec: rec, Variant: v}) }

	for len(p.Steps) < n {
		i := len(p.Steps)
		if len(bigAt) > 0 && i >= bigAt[0] {
			bigAt = bigAt[1:]
			size := 1<<20 + r.IntN(2<<20)
			rec := add(Record{Kind: KindBigPayload, Format: TimeMillis})
			p.Records[rec].ID = fmt.Sprintf("c%07d", rec)
			p.Records[rec].Payload = bigPayload(r, rec, size)
			step(rec, VariantOriginal)
			continue
		}
		if len(lateAt) > 0 && i >= lateAt[0] {
			lateAt = lateAt[1:]
			for range 3 + r.IntN(4) {
				rec := add(Record{Kind: KindLate, EventLag: time.Hour + time.Duration(r.IntN(3600))*time.Second, Format: randFormat(r)})
				p.Records[rec].ID = fmt.Sprintf("c%07d", rec)
				p.Records[rec].Payload = payload(r, rec, "late")
				step(rec, VariantOriginal)
			}
			rec := add(Record{Kind: KindPre1970})
			p.Records[rec].ID = fmt.Sprintf("c%07d", rec)
			p.Records[rec].Payload = payload(r, rec, "pre_1970")
			step(rec, VariantOriginal)
			continue
		}
		x := r.Float64()
		switch {
		case x < shareDup && len(committable) > 0:
			j := r.IntN(min(len(committable), 400))
			k := len(committable) - 1 - j // recent ones: well within the window
			orig := committable[k]
			committable = append(committable[:k], committable[k+1:]...)
			p.Records[orig].Second = payload(r, orig+1_000_000_000, "dup")
			step(orig, VariantDup)
		case x < shareDup+shareReplay && len(committable) > 0:
			k := len(committable) - 1 - r.IntN(min(len(committable), 400))
			orig := committable[k]
			committable = append(committable[:k], committable[k+1:]...)
			step(orig, VariantReplay)
		case x < shareDup+shareReplay+sharePoison:
			rec := add(poison(r, Kind(int(KindInvalidPayload)+r.IntN(5)), len(p.Records)))
			step(rec, VariantOriginal)
			if r.Float64() < 0.1 {
				step(rec, VariantEcho) // a poison redelivered: one copy per message
			}
		case x < shareDup+shareReplay+sharePoison+shareRace:
			rec := add(Record{Kind: KindRace, Format: randFormat(r)})
			p.Records[rec].ID = fmt.Sprintf("c%07d", rec)
			p.Records[rec].Payload = payload(r, rec, "race")
			p.Records[rec].Second = payload(r, rec+1_000_000_000, "race")
			step(rec, VariantOriginal)
			step(rec, VariantRace)
		case x < shareDup+shareReplay+sharePoison+shareRace+shareBigKey:
			rec := add(Record{Kind: KindBigKey, Format: randFormat(r)})
			prefix := fmt.Sprintf("c%07d-", rec)
			p.Records[rec].ID = prefix + strings.Repeat("k", 4096-len(prefix))
			p.Records[rec].Payload = payload(r, rec, "big_key")
			step(rec, VariantOriginal)
		default:
			rec := Record{Kind: KindUnique, Format: randFormat(r)}
			if r.Float64() < shareInBand {
				rec.Kind = KindInBand
				rec.EventLag = time.Duration(r.Int64N(int64(wc.Band) * 8 / 10))
			}
			id := add(rec)
			p.Records[id].ID = fmt.Sprintf("c%07d", id)
			p.Records[id].Payload = payload(r, id, rec.Kind.String())
			step(id, VariantOriginal)
			if r.Float64() < shareEcho {
				step(id, VariantEcho)
			}
			committable = append(committable, id)
		}
	}
	return p
}

// positions returns k step positions in [lo, hi), sorted.
func positions(r *rand.Rand, k, lo, hi int) []int {
	out := make([]int, 0, k)
	for range k {
		if hi <= lo {
			out = append(out, lo)
			continue
		}
		out = append(out, lo+r.IntN(hi-lo))
	}
	for i := 1; i < len(out); i++ { // insertion sort: k is small
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func randFormat(r *rand.Rand) TimeFormat {
	switch x := r.IntN(10); {
	case x < 6:
		return TimeMillis
	case x < 9:
		return TimeRFC3339
	}
	return TimeOffset
}

// words make payload text varied: escapes, non-ASCII, and quotes, so that
// the raw payload and {data.n} are both exercised.
var words = []string{"alpha", "beta", "gamma", "δέλτα", "ε", "\\u00e9t\\u00e9", "quote\\\"d", "tab\\t", "数据", "🚀", "x"}

// payload is a valid JSON object with "n" set to n.
func payload(r *rand.Rand, n int, kind string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"n":%d,"kind":%q,"text":"`, n, kind)
	for i := range 2 + r.IntN(8) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	b.WriteString(`"`)
	if r.IntN(4) == 0 {
		fmt.Fprintf(&b, `,"nested":{"a":[%d,{"b":null}],"ok":true}`, r.IntN(1000))
	}
	b.WriteString("}")
	return []byte(b.String())
}

// bigPayload is a valid JSON object of about size bytes.
func bigPayload(r *rand.Rand, n, size int) []byte {
	head := fmt.Sprintf(`{"n":%d,"kind":"big_payload","pad":"`, n)
	pad := make([]byte, max(0, size-len(head)-2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	for i := range pad {
		pad[i] = alphabet[r.IntN(len(alphabet))]
	}
	return []byte(head + string(pad) + `"}`)
}

// poison makes record n of a poison kind.
func poison(r *rand.Rand, k Kind, n int) Record {
	rec := Record{Kind: k, Format: randFormat(r)}
	rec.ID = fmt.Sprintf("p%07d", n)
	rec.Payload = payload(r, n, k.String())
	switch k {
	case KindInvalidPayload:
		rec.Payload = [][]byte{
			[]byte(fmt.Sprintf("not json %d", n)),
			[]byte(fmt.Sprintf(`{"n":%d,"text":"cut`, n)),
			[]byte(fmt.Sprintf(`"a bare string %d"`, n)),
			[]byte(fmt.Sprint(n)),
		}[r.IntN(4)]
	case KindMissingField:
		rec.Payload = [][]byte{
			[]byte(fmt.Sprintf(`{"kind":"missing_field","m":%d}`, n)),
			[]byte(`{"n":null}`),
			[]byte(`{}`),
		}[r.IntN(3)]
	case KindMissingID:
		rec.ID, rec.NoID = "", true
		rec.EmptyID = r.IntN(2) == 0
	case KindBadEventTime:
		bad := []string{"yesterday", "", "1772600767.89", "2026-13-01T00:00:00Z", "12:30", "0x1F"}
		if i := r.IntN(len(bad) + 1); i == len(bad) {
			rec.NoTS = true
		} else {
			rec.BadTS = bad[i]
		}
	case KindTooLarge:
		prefix := rec.ID + "-"
		size := 4097 // one byte over
		if r.IntN(2) == 0 {
			size += r.IntN(4000)
		}
		rec.ID = prefix + strings.Repeat("t", size-len(prefix))
	}
	return rec
}

// FormatTS writes an event time as the ts attribute, and returns the time
// it denotes (the event time as pubsink reads it).
func FormatTS(t time.Time, f TimeFormat) (string, time.Time) {
	switch f {
	case TimeRFC3339:
		t = t.UTC().Truncate(time.Microsecond)
		return t.Format("2006-01-02T15:04:05.000000Z07:00"), t
	case TimeOffset:
		t = t.In(time.FixedZone("", 2*3600))
		return t.Format(time.RFC3339Nano), t
	}
	t = t.Truncate(time.Millisecond)
	return fmt.Sprint(t.UnixMilli()), t
}

// pre1970TS is the ts attribute of KindPre1970: one second before 1970.
const pre1970TS = "-1000"

// Summary counts the plan's records by kind and messages by variant.
func (p *Plan) Summary() string {
	var kinds [numKinds]int
	for _, r := range p.Records {
		kinds[r.Kind]++
	}
	variants := make([]int, len(variantNames))
	for _, s := range p.Steps {
		variants[s.Variant]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d records:", len(p.Records))
	for k, n := range kinds {
		fmt.Fprintf(&b, " %s %d", Kind(k), n)
	}
	fmt.Fprintf(&b, "; %d messages:", len(p.Steps))
	for v, n := range variants {
		fmt.Fprintf(&b, " %s %d", Variant(v), n)
	}
	return b.String()
}
