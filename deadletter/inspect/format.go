package inspect

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pubsink/pubsink/deadletter"
)

// The payload's encodings, as data_encoding names them.
const (
	encodingText   = "text"
	encodingBase64 = "base64"
)

// record is a copy as --json prints it, one object per line; its field
// names are part of the CLI's contract (docs/reference.md, "Inspecting dead
// letters"). Fields that are only sometimes there (reprocess, truncated)
// are left out when empty.
type record struct {
	MessageID    string            `json:"message_id"`
	Pipeline     string            `json:"pipeline"`
	Reason       string            `json:"reason"`
	Error        string            `json:"error"`
	PublishTime  string            `json:"publish_time"`
	FailedAt     string            `json:"failed_at"`
	Attributes   map[string]string `json:"attributes"`
	Size         int               `json:"size"`
	DataEncoding string            `json:"data_encoding"`
	Data         string            `json:"data"`
	Location     string            `json:"location"`
	Reprocess    string            `json:"reprocess,omitempty"`
	Truncated    string            `json:"truncated,omitempty"`
}

// unreadable is what --json prints for an entry that is not a copy.
type unreadable struct {
	Location   string `json:"location"`
	Unreadable string `json:"unreadable"`
}

func recordOf(e *deadletter.Entry) record {
	c := e.Copy
	enc, data := payload(c.Data)
	attrs := c.Attributes
	if attrs == nil {
		attrs = map[string]string{}
	}
	return record{
		MessageID:    c.MessageID,
		Pipeline:     c.Pipeline,
		Reason:       string(c.Reason),
		Error:        c.Error,
		PublishTime:  c.PublishTime.UTC().Format(time.RFC3339Nano),
		FailedAt:     c.FailedAt.UTC().Format(time.RFC3339Nano),
		Attributes:   attrs,
		Size:         len(c.Data),
		DataEncoding: enc,
		Data:         data,
		Location:     e.Location,
		Reprocess:    c.Reprocess,
		Truncated:    c.Truncated,
	}
}

// payload returns the payload as text when it reads as text (valid UTF-8
// without control characters but tab, newline and carriage return, so
// that printing it cannot drive a terminal), else in standard base64.
func payload(b []byte) (encoding, data string) {
	if isText(b) {
		return encodingText, string(b)
	}
	return encodingBase64, base64.StdEncoding.EncodeToString(b)
}

func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

// printer writes copies as text or JSON lines.
type printer struct {
	w       io.Writer
	json    *json.Encoder // nil: text
	started bool          // the text header is written
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	if w == nil {
		w = io.Discard
	}
	p := &printer{w: w}
	if asJSON {
		p.json = json.NewEncoder(w)
		p.json.SetEscapeHTML(false) // payloads and errors as they are: <, >, &
	}
	return p
}

// The columns of a list line; the widths fit a Pub/Sub message ID, a
// millisecond time and the longest reason, so lines stay aligned as they
// stream out.
const (
	listFormat = "%-20s %-24s %-18s %9s  %s\n"
	// shortError is how many characters of the error's first line a list
	// line keeps.
	shortError = 60
	listTime   = "2006-01-02T15:04:05.000Z07:00"
)

// line prints e as one list line (text) or one JSON object.
func (p *printer) line(e *deadletter.Entry) error {
	if p.json != nil {
		return p.encode(e)
	}
	if !p.started {
		p.started = true
		if _, err := fmt.Fprintf(p.w, listFormat, "MESSAGE_ID", "FAILED_AT", "REASON", "BYTES", "ERROR"); err != nil {
			return err
		}
	}
	var err error
	if e.Err != nil {
		_, err = fmt.Fprintf(p.w, listFormat, "-", "-", "unreadable", "-", e.Location+": "+short(e.Err.Error()))
	} else {
		c := e.Copy
		_, err = fmt.Fprintf(p.w, listFormat, c.MessageID, c.FailedAt.UTC().Format(listTime), c.Reason, fmt.Sprint(len(c.Data)), short(c.Error))
	}
	return err
}

func (p *printer) encode(e *deadletter.Entry) error {
	if e.Err != nil {
		return p.json.Encode(unreadable{Location: e.Location, Unreadable: e.Err.Error()})
	}
	return p.json.Encode(recordOf(e))
}

// short is the first line of s, cut to shortError characters.
func short(s string) string {
	s, _, cut := strings.Cut(s, "\n")
	if utf8.RuneCountInString(s) > shortError {
		s = string([]rune(s)[:shortError-1]) + "…"
		cut = false
	}
	if cut {
		s += " …"
	}
	return s
}

// whole prints e entire: one JSON object, or a field per line under the
// JSON names, the payload last.
func (p *printer) whole(e *deadletter.Entry) error {
	if p.json != nil {
		return p.encode(e)
	}
	r := recordOf(e)
	var b strings.Builder
	field := func(name, value string) {
		// Continuation lines line up under the value.
		fmt.Fprintf(&b, "%-14s%s\n", name, strings.ReplaceAll(value, "\n", "\n"+strings.Repeat(" ", 14)))
	}
	field("message_id", r.MessageID)
	field("pipeline", r.Pipeline)
	field("reason", r.Reason)
	field("error", r.Error)
	field("publish_time", r.PublishTime)
	field("failed_at", r.FailedAt)
	if r.Reprocess != "" {
		field("reprocess", r.Reprocess)
	}
	if r.Truncated != "" {
		field("truncated", r.Truncated)
	}
	field("location", r.Location)
	if len(r.Attributes) == 0 {
		field("attributes", "(none)")
	}
	for i, k := range slices.Sorted(maps.Keys(r.Attributes)) {
		name := ""
		if i == 0 {
			name = "attributes"
		}
		field(name, k+"="+r.Attributes[k])
	}
	field("size", fmt.Sprint(r.Size))
	field("data_encoding", r.DataEncoding)
	b.WriteString("data\n")
	b.WriteString(r.Data)
	if !strings.HasSuffix(r.Data, "\n") {
		b.WriteString("\n")
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}
