package logging

import (
	"sync"
	"time"

	"go.uber.org/zap/zapcore"
)

// Entry is one warning or error as Recent keeps it.
type Entry struct {
	Time    time.Time
	Level   string // WARNING, ERROR, …: Cloud Logging's severity
	Message string
	Error   string // the "error" field, if any
}

// Recent keeps the last warnings and errors of each pipeline (by the
// "pipeline" field; "" for the process's own), for the status page. It is a
// zapcore.Core: tee it into the process logger (zapcore.NewTee). It keeps
// at most n entries per pipeline, newest first; safe for concurrent use.
type Recent struct {
	n int

	mu    sync.Mutex
	byKey map[string][]Entry
}

// NewRecent returns a Recent keeping n entries per pipeline.
func NewRecent(n int) *Recent { return &Recent{n: n, byKey: map[string][]Entry{}} }

// Last returns the kept entries of pipeline, newest first.
func (r *Recent) Last(pipeline string) []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Entry(nil), r.byKey[pipeline]...)
}

// Core is the zapcore.Core that feeds r.
func (r *Recent) Core() zapcore.Core { return &recentCore{r: r} }

func (r *Recent) add(pipeline string, e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list := append([]Entry{e}, r.byKey[pipeline]...)
	if len(list) > r.n {
		list = list[:r.n]
	}
	r.byKey[pipeline] = list
}

type recentCore struct {
	r        *Recent
	pipeline string
	err      string
}

func (c *recentCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *recentCore) With(fs []zapcore.Field) zapcore.Core {
	out := *c
	out.pipeline, out.err = fieldsOf(fs, c.pipeline, c.err)
	return &out
}

func (c *recentCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *recentCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	pipeline, errText := fieldsOf(fs, c.pipeline, c.err)
	c.r.add(pipeline, Entry{Time: e.Time, Level: severity(e.Level), Message: e.Message, Error: errText})
	return nil
}

func (c *recentCore) Sync() error { return nil }

// fieldsOf picks the pipeline and the error's text out of fs, keeping
// pipeline and errText where fs has none.
func fieldsOf(fs []zapcore.Field, pipeline, errText string) (string, string) {
	for _, f := range fs {
		switch {
		case f.Key == "pipeline" && f.Type == zapcore.StringType:
			pipeline = f.String
		case f.Type == zapcore.ErrorType:
			if err, ok := f.Interface.(error); ok && err != nil {
				errText = err.Error()
			}
		}
	}
	return pipeline, errText
}
