package audit

// The report: one JSON line per finding (--report), the counts of the
// summary, and the verdict that gives the exit code.

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"sync"
	"time"
	"unicode/utf8"
)

// Report collects the findings: each is written as a JSON line to w (nil:
// none) as it is found, and counted. Safe for concurrent use.
type Report struct {
	mu      sync.Mutex
	w       io.Writer
	counts  Counts
	missing map[string]bool // message IDs with a missing cell
}

// Counts are a report's findings, counted.
type Counts struct {
	// Missing counts missing cells (and dead-letter copies);
	// MissingMessages the messages they are of.
	Missing         int64 `json:"missing"`
	MissingMessages int64 `json:"missing_messages"`
	Doubled         int64 `json:"doubled"`
	Different       int64 `json:"different"`
}

// NewReport returns a report writing its lines to w (nil: only counting).
func NewReport(w io.Writer) *Report { return &Report{w: w, missing: map[string]bool{}} }

// line is a finding as the report writes it.
type line struct {
	Kind        Kind     `json:"kind"`
	Table       string   `json:"table,omitempty"`
	Row         string   `json:"row,omitempty"`
	Family      string   `json:"family,omitempty"`
	Column      string   `json:"column,omitempty"`
	Timestamp   string   `json:"timestamp,omitempty"`
	Expected    *string  `json:"expected,omitempty"`
	Found       *string  `json:"found,omitempty"`
	Base64      []string `json:"base64,omitempty"`
	MessageID   string   `json:"message_id,omitempty"`
	PublishTime string   `json:"publish_time,omitempty"`
	Key         string   `json:"key,omitempty"`
	Detail      string   `json:"detail"`
}

// Add counts f and writes its line.
func (r *Report) Add(f Finding) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch f.Kind {
	case Missing:
		r.counts.Missing++
		if f.MessageID != "" && !r.missing[f.MessageID] {
			r.missing[f.MessageID] = true
			r.counts.MissingMessages++
		}
	case Doubled:
		r.counts.Doubled++
	case Different:
		r.counts.Different++
	}
	if r.w == nil {
		return nil
	}
	l := line{Kind: f.Kind, Table: f.Table, Row: f.Row, Family: f.Family, Column: f.Column,
		Timestamp: when(f.Timestamp), MessageID: f.MessageID, PublishTime: when(f.PublishTime), Key: f.Key, Detail: f.Detail}
	// Values as text, or both in base64 when either is not UTF-8 (as the
	// stdout sink writes cells).
	enc := func(b []byte) string { return string(b) }
	if !utf8.Valid(f.Expected) || !utf8.Valid(f.Found) {
		enc = base64.StdEncoding.EncodeToString
		if f.Expected != nil {
			l.Base64 = append(l.Base64, "expected")
		}
		if f.Found != nil {
			l.Base64 = append(l.Base64, "found")
		}
	}
	if f.Expected != nil {
		s := enc(f.Expected)
		l.Expected = &s
	}
	if f.Found != nil {
		s := enc(f.Found)
		l.Found = &s
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	_, err = r.w.Write(append(b, '\n'))
	return err
}

// Finish writes the report's last line: {"summary": s}.
func (r *Report) Finish(s Summary) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil {
		return nil
	}
	b, err := json.Marshal(struct {
		Summary Summary `json:"summary"`
	}{s})
	if err != nil {
		return err
	}
	_, err = r.w.Write(append(b, '\n'))
	return err
}

// Counts returns the findings counted so far.
func (r *Report) Counts() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts
}

// Clean says whether nothing is missing or doubled: what the exit code
// says (a different cell is what a mapping change gives; reprocess fixes
// it).
func (c Counts) Clean() bool { return c.Missing == 0 && c.Doubled == 0 }

// when is a timestamp in microseconds as RFC 3339 UTC; "" for 0.
func when(us int64) string {
	if us == 0 {
		return ""
	}
	return time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
}
