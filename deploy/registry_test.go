package deploy

import (
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pubsink/pubsink/internal/metrics"
)

// TestExportedMetricsAreTheRegistrys: the contract's list is exactly what
// internal/metrics registers (every metric made to show once, as a running
// pipeline does), with the same type and labels.
func TestExportedMetricsAreTheRegistrys(t *testing.T) {
	m := metrics.New()
	p := m.Pipeline("orders")
	p.DeadLettered("late")
	p.SinkWriteErrors("Unavailable")
	p.DeadLetterErrors("Unavailable")
	p.ColumnNeverFilled("sink.columns.last_name")
	p.WatchWatermark(time.Now)
	p.WatchOldestInFlight(func() (time.Time, bool) { return time.Time{}, false })
	p.SinkWrite.Observe(0.01)
	p.CommitLatency.Observe(0.01)
	p.Stage("write").Observe(0.01)
	m.BigtableMutations("orders", metrics.CallMutateRows)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	seen := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "pubsink_") {
			continue
		}
		seen[name] = true
		want, ok := exportedMetrics[name]
		if !ok {
			t.Errorf("%s is registered but not in exportedMetrics (nor, probably, in docs/reference.md)", name)
			continue
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		wantLabels := slices.Sorted(slices.Values(want.labels))
		if types[f.GetType()] != want.typ || !slices.Equal(labels, wantLabels) {
			t.Errorf("%s: %s with labels %v, the contract says %s with %v", name, types[f.GetType()], labels, want.typ, wantLabels)
		}
	}
	for name := range exportedMetrics {
		if !seen[name] {
			t.Errorf("%s is in exportedMetrics but internal/metrics does not register it", name)
		}
	}
}
