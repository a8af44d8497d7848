package logging

import (
	"maps"
	"strconv"

	"go.uber.org/zap/zapcore"
)

// Cloud Logging's special fields in a JSON line (cloud.google.com/logging/docs/structured-logging).
const (
	sourceLocationKey = "logging.googleapis.com/sourceLocation"
	labelsKey         = "logging.googleapis.com/labels"
)

// labelFields are the fields that also become Cloud Logging labels, which
// Logs Explorer indexes and filters on cheaply. They stay fields too, for
// readers of the raw line.
var labelFields = map[string]bool{"pipeline": true}

// cloudCore adds Cloud Logging's sourceLocation (from the entry's caller)
// and labels (from the label fields given to With or to the call) to every
// entry of the JSON encoder underneath.
type cloudCore struct {
	zapcore.Core
	labels map[string]string // shared, never written after With made it
}

func (c *cloudCore) With(fs []zapcore.Field) zapcore.Core {
	return &cloudCore{Core: c.Core.With(fs), labels: withLabels(c.labels, fs)}
}

func (c *cloudCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *cloudCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	extra := make([]zapcore.Field, 0, len(fs)+2)
	extra = append(extra, fs...)
	if e.Caller.Defined {
		extra = append(extra, zapcore.Field{Key: sourceLocationKey, Type: zapcore.ObjectMarshalerType, Interface: sourceLocation(e.Caller)})
	}
	if labels := withLabels(c.labels, fs); len(labels) > 0 {
		extra = append(extra, zapcore.Field{Key: labelsKey, Type: zapcore.ObjectMarshalerType, Interface: stringMap(labels)})
	}
	return c.Core.Write(e, extra)
}

// withLabels returns labels with the label fields of fs added (a copy when
// there are any; labels itself otherwise).
func withLabels(labels map[string]string, fs []zapcore.Field) map[string]string {
	copied := false
	for _, f := range fs {
		if !labelFields[f.Key] || f.Type != zapcore.StringType {
			continue
		}
		if !copied {
			labels, copied = maps.Clone(labels), true
			if labels == nil {
				labels = map[string]string{}
			}
		}
		labels[f.Key] = f.String
	}
	return labels
}

// sourceLocation is a caller as Cloud Logging reads it.
type sourceLocation zapcore.EntryCaller

func (s sourceLocation) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("file", s.File)
	enc.AddString("line", strconv.Itoa(s.Line)) // a string, as the LogEntrySourceLocation JSON has it
	enc.AddString("function", s.Function)
	return nil
}

type stringMap map[string]string

func (m stringMap) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	for k, v := range m {
		enc.AddString(k, v)
	}
	return nil
}
