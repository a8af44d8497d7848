package deadletter

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pubsink/pubsink/source"
)

// The attributes a dead-lettered message gains (docs/reference.md "Dead
// letter"). The File output uses the same names as JSON keys, the Table
// output the names without the prefix as column qualifiers.
const (
	AttrReason      = "pubsink_reason"
	AttrError       = "pubsink_error"
	AttrPipeline    = "pubsink_pipeline"
	AttrMessageID   = "pubsink_message_id"
	AttrPublishTime = "pubsink_publish_time" // RFC 3339, UTC, nanoseconds as Pub/Sub gives them
	AttrFailedAt    = "pubsink_failed_at"    // RFC 3339, UTC
	// AttrTruncated is set only on a Topic copy that Pub/Sub could not hold
	// whole (see Topic); it says what was cut. Replay never republishes
	// such a copy.
	AttrTruncated = "pubsink_truncated"
	// AttrReprocess is set only on a copy that a reprocess run wrote (see
	// Clients.Reprocess); its value is the run's name, e.g.
	// "orders~r20261203t053012z". A copy of the live pipeline has none.
	AttrReprocess = "pubsink_reprocess"

	// AttrPrefix is reserved: an original attribute with this prefix is not
	// carried into the copy, and replay removes every such attribute, except
	// that a Topic copy carries the original's goog* attributes under it
	// (see googPrefix).
	AttrPrefix = "pubsink_"
)

// googPrefix starts the attribute keys that Pub/Sub reserves: "Attribute
// keys must not start with goog" (https://cloud.google.com/pubsub/docs/publisher,
// "Use attributes to publish a message"). Pub/Sub itself sets such
// attributes on what it delivers (googclient_schemaname, …encoding,
// …revisionid on a topic with a schema), so a copy published as it came
// could be refused; the emulator does not check. Google's client libraries
// do publish googclient_traceparent with tracing on, so the rule may not be
// enforced for every goog key, but nothing documents which: a Topic copy
// carries each goog* attribute under AttrPrefix+key
// (pubsink_googclient_schemaname), and reading the copy back restores the
// key. No attribute of pubsink's own starts with pubsink_goog, so the two
// never meet. The File and Table outputs are not published and keep the
// keys as they are.
const googPrefix = "goog"

// Republishable returns the attributes of an original that may be
// published again, as replay does: every one but those whose key starts
// with goog (reserved, see googPrefix). Pub/Sub sets its own again: on a
// topic with a schema, the googclient_schema* attributes of the revision
// the republished message is validated against. attrs is not changed.
func Republishable(attrs map[string]string) map[string]string {
	out := make(map[string]string, len(attrs))
	for k, v := range attrs {
		if !strings.HasPrefix(k, googPrefix) {
			out[k] = v
		}
	}
	return out
}

// publishedKey is the key under which a Topic copy carries the original's
// attribute k.
func publishedKey(k string) string {
	if strings.HasPrefix(k, googPrefix) {
		return AttrPrefix + k
	}
	return k
}

// renamedFrom returns the original key of a renamed attribute of a Topic
// copy (see publishedKey), and false for any other key.
func renamedFrom(k string) (string, bool) {
	orig, ok := strings.CutPrefix(k, AttrPrefix)
	return orig, ok && strings.HasPrefix(orig, googPrefix)
}

// MaxErrorBytes bounds pubsink_error: Pub/Sub refuses an attribute value
// over 1024 bytes, and the text is for a human deciding what to do, not a
// log. Longer texts are cut at a character boundary and end in "…".
const MaxErrorBytes = 1024

// Copy is one dead-letter copy: the original message and why it could not
// be written. Every output stores all of it; replay reads it back.
type Copy struct {
	Pipeline    string
	MessageID   string // the original's Pub/Sub message ID
	PublishTime time.Time
	FailedAt    time.Time
	Reason      Reason
	Error       string // at most MaxErrorBytes
	// Attributes are the original's, without any pubsink_* attribute.
	Attributes map[string]string
	Data       []byte
	// Truncated is empty unless the output could not hold the copy whole
	// (only the Topic output, near Pub/Sub's size limits); it says what was
	// cut.
	Truncated string
	// Reprocess is the name of the reprocess run that wrote the copy
	// (AttrReprocess), "" for the live pipeline.
	Reprocess string
}

// newCopy describes m, dead-lettered by pipeline at now. It copies the
// attribute map (the caller's stays untouched) and shares m.Data, which is
// never modified.
func newCopy(pipeline string, m *source.Message, reason Reason, cause error, now time.Time) *Copy {
	c := &Copy{
		Pipeline:    pipeline,
		MessageID:   m.ID,
		PublishTime: m.PublishTime.UTC(),
		FailedAt:    now.UTC(),
		Reason:      reason,
		Attributes:  make(map[string]string, len(m.Attributes)),
		Data:        m.Data,
	}
	if cause != nil {
		c.Error = ErrorText(cause)
	}
	for k, v := range m.Attributes {
		if !strings.HasPrefix(k, AttrPrefix) {
			c.Attributes[k] = v
		}
	}
	return c
}

// ErrorText is the error text a copy dead-lettered for cause carries
// (AttrError): cause's text made to fit an attribute value.
func ErrorText(cause error) string { return errorText(cause.Error()) }

// errorText makes s fit an attribute value: valid UTF-8 (a proto3 string
// must be) and at most MaxErrorBytes.
func errorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return truncateUTF8(s, MaxErrorBytes)
}

// truncateUTF8 cuts s to at most n bytes at a character boundary, marking
// the cut with "…" (3 bytes) when n leaves room for it.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	if n >= len(ellipsis) {
		n -= len(ellipsis)
	} else {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// fields returns the pubsink_* attributes of c.
func (c *Copy) fields() map[string]string {
	f := map[string]string{
		AttrReason:      string(c.Reason),
		AttrError:       c.Error,
		AttrPipeline:    c.Pipeline,
		AttrMessageID:   c.MessageID,
		AttrPublishTime: formatTime(c.PublishTime),
		AttrFailedAt:    formatTime(c.FailedAt),
	}
	if c.Truncated != "" {
		f[AttrTruncated] = c.Truncated
	}
	if c.Reprocess != "" {
		f[AttrReprocess] = c.Reprocess
	}
	return f
}

// AllAttributes returns the attributes of the dead-letter message: the
// original's, its goog* ones renamed (see googPrefix), plus the pubsink_*
// ones. It is what the Topic output publishes.
func (c *Copy) AllAttributes() map[string]string {
	a := make(map[string]string, len(c.Attributes)+8)
	for k, v := range c.Attributes {
		a[publishedKey(k)] = v
	}
	maps.Copy(a, c.fields())
	return a
}

// reserved reports whether an attribute name is one of pubsink's, which a
// Copy's original attributes never hold.
func reserved(name, _ string) bool { return strings.HasPrefix(name, AttrPrefix) }

// copyFromAttributes rebuilds a Copy from a dead-letter message's data and
// attributes, restoring the keys of the original's goog* attributes (see
// googPrefix). It fails when a field that replay needs is missing or
// malformed: such a message was not written by pubsink.
func copyFromAttributes(data []byte, attrs map[string]string) (*Copy, error) {
	c := &Copy{Data: data, Attributes: make(map[string]string, len(attrs))}
	for k, v := range attrs {
		if !strings.HasPrefix(k, AttrPrefix) {
			c.Attributes[k] = v // a goog* one too, as a copy made before the renaming has it
		}
	}
	for k, v := range attrs { // after: the renamed one wins over such a twin
		if orig, ok := renamedFrom(k); ok {
			c.Attributes[orig] = v
		}
	}
	if err := c.setFields(attrs); err != nil {
		return nil, err
	}
	return c, nil
}

// setFields fills c's pubsink fields from their attribute names. The
// optional ones (AttrTruncated, AttrReprocess) may be absent.
func (c *Copy) setFields(f map[string]string) error {
	c.Pipeline, c.MessageID = f[AttrPipeline], f[AttrMessageID]
	c.Error, c.Truncated, c.Reprocess = f[AttrError], f[AttrTruncated], f[AttrReprocess]
	var errs []error
	if c.Pipeline == "" || c.MessageID == "" {
		errs = append(errs, fmt.Errorf("%s or %s is missing", AttrPipeline, AttrMessageID))
	}
	r, ok := ParseReason(f[AttrReason])
	if !ok {
		errs = append(errs, fmt.Errorf("%s %q is not a reason", AttrReason, f[AttrReason]))
	}
	c.Reason = r
	var err error
	if c.PublishTime, err = parseTime(f[AttrPublishTime]); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", AttrPublishTime, err))
	}
	if c.FailedAt, err = parseTime(f[AttrFailedAt]); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", AttrFailedAt, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("not a pubsink dead-letter copy: %w", errors.Join(errs...))
	}
	return nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not RFC 3339", s)
	}
	return t.UTC(), nil
}
