package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// timeCollector exports, at scrape time, the figures of each pipeline that
// are times rather than counts: reading them when asked costs nothing on
// the hot path and is never stale, and a figure not known yet is absent
// rather than 0 (a watermark of 0 would read as 56 years of lag).
type timeCollector struct {
	watermark, lag, oldest *prometheus.Desc

	mu        sync.Mutex
	pipelines map[string]*pipelineTimes
	now       func() time.Time
}

// pipelineTimes are the sources of one pipeline's figures; nil: none.
type pipelineTimes struct {
	watermark func() time.Time
	oldest    func() (time.Time, bool)
}

func newTimeCollector() *timeCollector {
	pl := []string{"pipeline"}
	return &timeCollector{
		watermark: prometheus.NewDesc("pubsink_watermark_timestamp_seconds",
			"Event-time watermark of the pipeline, in seconds since the Unix epoch; absent until it is known.", pl, nil),
		lag: prometheus.NewDesc("pubsink_watermark_lag_seconds",
			"How far the watermark is behind this process's clock, in seconds; absent until it is known.", pl, nil),
		oldest: prometheus.NewDesc("pubsink_oldest_in_flight_age_seconds",
			"Age since publication of the oldest message being processed, in seconds (to the second); 0 when none is.", pl, nil),
		pipelines: map[string]*pipelineTimes{},
		now:       time.Now,
	}
}

func (c *timeCollector) set(pipeline string, f func(*pipelineTimes)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt := c.pipelines[pipeline]
	if pt == nil {
		pt = &pipelineTimes{}
		c.pipelines[pipeline] = pt
	}
	f(pt)
}

func (c *timeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.watermark
	ch <- c.lag
	ch <- c.oldest
}

func (c *timeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for name, pt := range c.pipelines {
		if pt.watermark != nil {
			if wm := pt.watermark(); !wm.IsZero() {
				ch <- prometheus.MustNewConstMetric(c.watermark, prometheus.GaugeValue, float64(wm.UnixMilli())/1e3, name)
				ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, now.Sub(wm).Seconds(), name)
			}
		}
		if pt.oldest != nil {
			age := 0.0
			if t, ok := pt.oldest(); ok {
				age = max(now.Sub(t).Seconds(), 0)
			}
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, name)
		}
	}
}
