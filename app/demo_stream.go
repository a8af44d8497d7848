package app

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// reading is one message of the sample stream.
type reading struct {
	data      []byte
	attrs     map[string]string
	kind      string    // "reading", "duplicate" or the expected dead-letter reason
	publishAt time.Time // the publish time the fake Pub/Sub records
}

// sampleStream makes n sensor readings from 12 sensors, one every 2 s of
// event time per sensor, ending now, each published up to a second after its
// event (so slightly out of order); plus duplicates (a publisher retrying a
// few seconds later: same reading_id, new message ID), heartbeats that the
// filter skips, and poison messages of each bad-input kind. It is sorted by publish time, as a live topic would
// have received it, and deterministic for a seed.
func sampleStream(n int, now time.Time, seed uint64) []reading {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	const sensors = 12
	perSensor := (n + sensors - 1) / sensors
	// The stream spans perSensor·2 s (8 minutes by default), inside the
	// in-process fake's retention of 10 minutes.
	start := now.Add(-time.Duration(perSensor) * 2 * time.Second)
	out := make([]reading, 0, n+n/20+40)
	for i := 0; i < n; i++ {
		sensor := i % sensors
		step := i / sensors
		at := start.Add(time.Duration(step)*2*time.Second + time.Duration(sensor)*97*time.Millisecond)
		temp := 19 + 3*math.Sin(float64(step)/40+float64(sensor)) + rng.Float64()*0.4
		out = append(out, reading{
			data: fmt.Appendf(nil, `{"sensor":"sensor-%02d","temperature_c":%.1f,"humidity_pct":%d,"battery_v":%.2f}`,
				sensor+1, temp, 35+rng.IntN(20), 3.0+rng.Float64()*0.3),
			attrs: map[string]string{
				"sensor_id":  fmt.Sprintf("sensor-%02d", sensor+1),
				"reading_id": fmt.Sprintf("r-%02d-%06d", sensor+1, step),
				"event_ts":   strconv.FormatInt(at.UnixMilli(), 10),
			},
			kind:      "reading",
			publishAt: at.Add(100*time.Millisecond + time.Duration(rng.Int64N(int64(900*time.Millisecond)))),
		})
	}
	// Duplicates: 5% of readings published again a few seconds later.
	for range n / 20 {
		orig := out[rng.IntN(n)]
		out = append(out, reading{data: orig.data, attrs: orig.attrs, kind: "duplicate",
			publishAt: orig.publishAt.Add(2*time.Second + time.Duration(rng.Int64N(int64(20*time.Second))))})
	}
	// Poison: each kind of bad input the pipeline must dead-letter.
	poison := func(count int, kind string, mk func(i int) reading) {
		for i := range count {
			r := mk(i)
			r.kind = kind
			r.publishAt = start.Add(time.Duration(rng.Int64N(int64(now.Sub(start)))))
			out = append(out, r)
		}
	}
	nowMS := strconv.FormatInt(now.UnixMilli(), 10)
	poison(15, "invalid_payload", func(i int) reading {
		return reading{data: fmt.Appendf(nil, "temperature=%d.5;humidity=40", 20+i%5),
			attrs: map[string]string{"sensor_id": "sensor-01", "reading_id": fmt.Sprintf("bad-csv-%d", i), "event_ts": nowMS}}
	})
	poison(10, "missing_field", func(i int) reading {
		return reading{data: []byte(`{"temperature_c":20.1,"humidity_pct":41}`),
			attrs: map[string]string{"reading_id": fmt.Sprintf("no-sensor-%d", i), "event_ts": nowMS}}
	})
	poison(5, "missing_field", func(i int) reading {
		return reading{data: []byte(`{"sensor":"sensor-02","humidity_pct":41}`),
			attrs: map[string]string{"sensor_id": "sensor-02", "reading_id": fmt.Sprintf("no-temp-%d", i), "event_ts": nowMS}}
	})
	poison(10, "bad_event_time", func(i int) reading {
		return reading{data: []byte(`{"sensor":"sensor-03","temperature_c":20.1,"humidity_pct":41}`),
			attrs: map[string]string{"sensor_id": "sensor-03", "reading_id": fmt.Sprintf("bad-ts-%d", i), "event_ts": "yesterday at noon"}}
	})
	// Heartbeats: the devices' liveness pings share the topic; the filter
	// acks them unwritten. They carry no reading_id or event_ts: the filter
	// runs before either is read.
	poison(60, "filtered", func(i int) reading {
		return reading{data: []byte(`{"status":"ok"}`),
			attrs: map[string]string{"type": "heartbeat", "sensor_id": fmt.Sprintf("sensor-%02d", i%12+1)}}
	})
	slices.SortStableFunc(out, func(a, b reading) int { return a.publishAt.Compare(b.publishAt) })
	return out
}
