package demo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// reading is one message of the sample stream.
type reading struct {
	data  []byte
	attrs map[string]string
	kind  string // "reading", "duplicate" or the expected dead-letter reason
}

// sampleStream makes n sensor readings from 12 sensors, one every 5 s of
// event time per sensor, ending now, published slightly out of order; plus
// duplicates (a publisher retrying: same reading_id, new message ID) and
// poison messages of each bad-input kind. It is deterministic for a seed.
func sampleStream(n int, now time.Time, seed uint64) []reading {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	const sensors = 12
	perSensor := (n + sensors - 1) / sensors
	start := now.Add(-time.Duration(perSensor) * 5 * time.Second)
	out := make([]reading, 0, n+n/20+40)
	for i := 0; i < n; i++ {
		sensor := i % sensors
		step := i / sensors
		at := start.Add(time.Duration(step)*5*time.Second + time.Duration(sensor)*97*time.Millisecond)
		temp := 19 + 3*math.Sin(float64(step)/40+float64(sensor)) + rng.Float64()*0.4
		out = append(out, reading{
			data: fmt.Appendf(nil, `{"sensor":"sensor-%02d","temperature_c":%.1f,"humidity_pct":%d,"battery_v":%.2f}`,
				sensor+1, temp, 35+rng.IntN(20), 3.0+rng.Float64()*0.3),
			attrs: map[string]string{
				"sensor_id":  fmt.Sprintf("sensor-%02d", sensor+1),
				"reading_id": fmt.Sprintf("r-%02d-%06d", sensor+1, step),
				"event_ts":   strconv.FormatInt(at.UnixMilli(), 10),
			},
			kind: "reading",
		})
	}
	// Out of order: swap neighbours within a few positions, as concurrent
	// publishers do.
	for i := range out {
		j := min(len(out)-1, i+rng.IntN(8))
		out[i], out[j] = out[j], out[i]
	}
	// Duplicates: 5% of readings published again later.
	for range n / 20 {
		orig := out[rng.IntN(n)]
		out = append(out, reading{data: orig.data, attrs: orig.attrs, kind: "duplicate"})
	}
	// Poison: each kind of bad input the pipeline must dead-letter.
	poison := func(count int, kind string, mk func(i int) reading) {
		for i := range count {
			r := mk(i)
			r.kind = kind
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
	// Spread the extras through the stream.
	for i := n; i < len(out); i++ {
		j := rng.IntN(i + 1)
		out[i], out[j] = out[j], out[i]
	}
	return out
}
