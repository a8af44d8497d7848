package reprocess

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"
	"golang.org/x/term"
)

// Reporter shows a run's progress: a bar redrawn in place on a terminal
// (github.com/schollz/progressbar), a log line every LogEvery otherwise.
type Reporter struct {
	what string // the command: the log line's first word
	bar  *progressbar.ProgressBar
	log  *zap.Logger
	last time.Time
}

// LogEvery is how often a Reporter without a terminal logs the progress.
const LogEvery = 10 * time.Second

// NewReporter returns a reporter of command what (reprocess, audit)
// writing to w: a bar when w is a terminal, log lines to log otherwise.
func NewReporter(w io.Writer, log *zap.Logger, what string) *Reporter {
	r := &Reporter{what: what, log: log}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.bar = progressbar.NewOptions(1000,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetPredictTime(false), // the time left is the gate's, in the description
			progressbar.OptionClearOnFinish(),
		)
	}
	return r
}

// Line is the progress as one line of text: messages done, share of the
// range, rate and time left.
func (p Progress) Line() string {
	left := p.left()
	frontier := "-"
	if !p.Frontier.IsZero() {
		frontier = p.Frontier.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%d messages done (%.0f%% of the range, up to %s), %.0f/s, %s; %d after the range skipped",
		p.Done, 100*p.Fraction, frontier, p.Rate, left, p.Beyond) + p.quiet()
}

// left says the time left.
func (p Progress) left() string {
	if p.Left > 0 {
		return "about " + p.Left.Round(time.Second).String() + " left"
	}
	return "time left unknown"
}

// quiet says, after a second without a message of the range, for how
// long: the run ends when that reaches the idle period.
func (p Progress) quiet() string {
	if p.Quiet < time.Second {
		return ""
	}
	return fmt.Sprintf("; none of the range for %s", p.Quiet.Round(time.Second))
}

// Show reports p: redraws the bar, or logs it if LogEvery passed since the
// last line.
func (r *Reporter) Show(p Progress) {
	if r.bar != nil {
		r.bar.Describe(fmt.Sprintf("%d messages, %.0f/s, %s%s", p.Done, p.Rate, p.left(), p.quiet()))
		r.bar.Set(int(p.Fraction * 1000))
		return
	}
	if now := time.Now(); now.Sub(r.last) >= LogEvery {
		r.last = now
		r.log.Info(r.what+" progress: "+p.Line(), zap.Int64("done", p.Done), zap.Float64("fraction", p.Fraction),
			zap.Float64("messages_per_second", p.Rate), zap.Float64("seconds_left", p.LeftSecs), zap.Int64("beyond", p.Beyond))
	}
}

// Close ends the bar (a terminal's line is cleared for the summary).
func (r *Reporter) Close() {
	if r.bar != nil {
		r.bar.Finish()
	}
}

// Watch shows the gate's progress on r four times a second until ctx ends
// (false) or the range is done, no message of it having arrived for idle
// and none in flight (true).
func Watch(ctx context.Context, g *Gate, r *Reporter, idle time.Duration) bool {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		r.Show(g.Progress())
		if g.Done(idle) {
			return true
		}
	}
}
