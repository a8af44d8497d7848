package chart

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

var end = time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)

// times returns n times every step, the last at end.
func times(n int, step time.Duration) []time.Time {
	ts := make([]time.Time, n)
	for i := range ts {
		ts[i] = end.Add(-time.Duration(n-1-i) * step)
	}
	return ts
}

// render renders c and fails unless the SVG is well-formed XML.
func render(t *testing.T, c Chart) string {
	t.Helper()
	svg := string(c.SVG())
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
	}
	return svg
}

var (
	pointsRE = regexp.MustCompile(`<polyline [^>]*points="([^"]*)"`)
	circleRE = regexp.MustCompile(`<circle cx="([^"]*)" cy="([^"]*)"`)
)

func polylines(svg string) []string {
	var out []string
	for _, m := range pointsRE.FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

// The default size, one series: the plot spans x 54 to 346 and y 28 (top)
// to 166 (bottom).
func TestSVGScalesTheValuesToTheAxes(t *testing.T) {
	svg := render(t, Chart{Title: "Lag", Unit: "s", Times: []time.Time{end.Add(-time.Minute), end.Add(-30 * time.Second), end},
		End: end, Span: time.Minute, Series: []Series{{Name: "lag", Color: "#123", Values: []float64{0, 8.85, 17.7}}}})
	// 17.7 makes an axis to 20 by 5: 8.85 is 44.25% of the height up.
	if got, want := polylines(svg), []string{"54.0,166.0 200.0,104.9 346.0,43.9"}; !equal(got, want) {
		t.Errorf("points %q, want %q\n%s", got, want, svg)
	}
	for _, want := range []string{`text-anchor="end">0</text>`, `>5</text>`, `>10</text>`, `>15</text>`, `>20</text>`,
		`>−1 min</text>`, `>−30 s</text>`, `>now</text>`, `>last 1 min</text>`, `rotate(-90)" text-anchor="middle">s</text>`,
		`<title>Lag</title>`, `aria-label="Lag"`, `width="360" height="200"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %q:\n%s", want, svg)
		}
	}
	if strings.Contains(svg, `>25</text>`) || strings.Contains(svg, "legend") {
		t.Errorf("an axis past 20, or a legend for one series:\n%s", svg)
	}
}

func TestYScaleIsRound(t *testing.T) {
	for _, c := range []struct{ max, top, step float64 }{
		{17.7, 20, 5}, {20, 20, 5}, {1, 1, 0.5}, {0, 1, 0.5}, {math.NaN(), 1, 0.5}, {0.03, 0.03, 0.01}, {0.035, 0.04, 0.01},
		{100, 100, 50}, {101, 150, 50}, {12345, 15000, 5000}, {3, 3, 1},
	} {
		top, step := yScale(c.max)
		if math.Abs(top-c.top) > 1e-9 || math.Abs(step-c.step) > 1e-9 {
			t.Errorf("yScale(%v) = %v, %v; want %v, %v", c.max, top, step, c.top, c.step)
		}
	}
	for _, c := range []struct {
		v, step, top float64
		want         string
	}{{0.5, 0.5, 1, "0.5"}, {1, 0.5, 1, "1"}, {1.5, 0.5, 2, "1.5"}, {0.02, 0.01, 0.04, "0.02"}, {15, 5, 20, "15"}, {15000, 5000, 15000, "15k"}, {2.5e7, 5e6, 2.5e7, "25M"}, {0, 5000, 15000, "0"}} {
		if got := label(c.v, c.step, c.top); got != c.want {
			t.Errorf("label(%v, %v, %v) = %q, want %q", c.v, c.step, c.top, got, c.want)
		}
	}
	for _, c := range []struct {
		span, step time.Duration
		label      string
	}{{15 * time.Minute, 5 * time.Minute, "15 min"}, {time.Minute, 10 * time.Second, "1 min"}, {2 * time.Hour, 30 * time.Minute, "2 h"}, {90 * time.Second, 15 * time.Second, "90 s"}} {
		if got := tickStep(c.span); got != c.step {
			t.Errorf("tickStep(%v) = %v, want %v", c.span, got, c.step)
		}
		if got := duration(c.span); got != c.label {
			t.Errorf("duration(%v) = %q, want %q", c.span, got, c.label)
		}
	}
}

func TestSVGEscapesItsText(t *testing.T) {
	svg := render(t, Chart{Title: `<b>"rates" & 'co'</b>`, Unit: "msg/s <x>", Times: times(3, time.Second), End: end, Span: time.Minute,
		Empty: "<i>", Series: []Series{
			{Name: "</svg><script>alert(1)</script>", Color: `red" onload="alert(1)`, Values: []float64{1, 2, 3}},
			{Name: "a & b", Color: "#000", Values: []float64{3, 2, 1}},
		}})
	for _, bad := range []string{"<script", "<b>", `onload="`, "<x>"} {
		if strings.Contains(svg, bad) {
			t.Errorf("the SVG holds %q unescaped:\n%s", bad, svg)
		}
	}
	for _, want := range []string{"&lt;b&gt;&#34;rates&#34; &amp; &#39;co&#39;&lt;/b&gt;", "&lt;/svg&gt;&lt;script&gt;", "msg/s &lt;x&gt;", `data-name="a &amp; b"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %q:\n%s", want, svg)
		}
	}
}

func TestSVGWithNothingToDrawSaysSo(t *testing.T) {
	two := []Series{{Name: "committed", Color: "#0a0"}, {Name: "retried", Color: "#a0a"}}
	for name, c := range map[string]Chart{
		"no time":                  {Series: two, Empty: "collecting: 0 s of history"},
		"one time":                 {Times: times(1, time.Second), Series: []Series{{Name: "a", Values: []float64{3}}}, Empty: "collecting: 0 s of history"},
		"no value":                 {Times: times(3, time.Second), Series: []Series{{Name: "a", Values: []float64{math.NaN(), math.Inf(1), math.NaN()}}}},
		"values before the span":   {Times: times(3, time.Hour), Series: []Series{{Name: "a", Values: []float64{1, 2, math.NaN()}}}},
		"series shorter than time": {Times: times(3, time.Second), Series: []Series{{Name: "a"}}},
	} {
		t.Run(name, func(t *testing.T) {
			c.End, c.Span, c.Title, c.Unit = end, 15*time.Minute, "Rates", "msg/s"
			svg := render(t, c)
			want := c.Empty
			if want == "" {
				want = "no data"
			}
			if !strings.Contains(svg, `<text class="empty"`) || !strings.Contains(svg, ">"+want+"</text>") {
				t.Errorf("the SVG does not say %q:\n%s", want, svg)
			}
			if strings.Contains(svg, "<polyline") || strings.Contains(svg, "<circle") || strings.Contains(svg, `class="series"`) {
				t.Errorf("the SVG draws a series:\n%s", svg)
			}
			for _, want := range []string{">last 15 min</text>", ">msg/s</text>", ">−15 min</text>", ">1</text>"} {
				if !strings.Contains(svg, want) {
					t.Errorf("the axes lack %q:\n%s", want, svg)
				}
			}
			if len(c.Series) > 1 && !strings.Contains(svg, ">retried</text>") {
				t.Errorf("the legend is missing:\n%s", svg)
			}
		})
	}
}

func TestSVGOfZerosIsTheBaseline(t *testing.T) {
	svg := render(t, Chart{Times: times(4, time.Second), End: end, Span: 4 * time.Second,
		Series: []Series{{Name: "z", Values: []float64{0, 0, 0, 0}}}})
	lines := polylines(svg)
	if len(lines) != 1 {
		t.Fatalf("%d polylines, want 1:\n%s", len(lines), svg)
	}
	for pt := range strings.FieldsSeq(lines[0]) {
		if !strings.HasSuffix(pt, ",166.0") {
			t.Errorf("point %s is off the baseline (y 166):\n%s", pt, svg)
		}
	}
	for _, want := range []string{">0</text>", ">0.5</text>", ">1</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("an axis of zeros lacks %q:\n%s", want, svg)
		}
	}
}

// A gap breaks the line, a value alone between gaps is a dot, a negative
// is drawn at 0, and nothing says NaN.
func TestSVGGuardsGapsAndNegatives(t *testing.T) {
	svg := render(t, Chart{Times: times(7, time.Second), End: end, Span: 6 * time.Second, Series: []Series{
		{Name: "s", Color: "#000", Values: []float64{1, math.NaN(), 2, 4, -5, math.Inf(-1), 4}},
	}})
	lines := polylines(svg)
	if len(lines) != 1 || len(strings.Fields(lines[0])) != 3 || !strings.HasSuffix(lines[0], ",166.0") {
		t.Errorf("polylines %q, want one of 3 points ending at 0 (y 166):\n%s", lines, svg)
	}
	if dots := circleRE.FindAllStringSubmatch(svg, -1); len(dots) != 2 || dots[0][1] != "54.0" || dots[1][1] != "346.0" {
		t.Errorf("dots %q, want the first and the last value:\n%s", dots, svg)
	}
	for _, bad := range []string{"NaN", "Inf", ",-"} {
		if strings.Contains(svg, bad) {
			t.Errorf("the SVG holds %q:\n%s", bad, svg)
		}
	}
}

// Six names do not fit one row of 300 pixels: the legend takes two, and
// the plot starts below them.
func TestSVGLegendWraps(t *testing.T) {
	var series []Series
	for _, name := range []string{"committed", "duplicate", "dead-lettered", "filtered", "dropped", "retried"} {
		series = append(series, Series{Name: name, Color: "#000", Values: []float64{1, 2}})
	}
	svg := render(t, Chart{Times: times(2, time.Second), End: end, Span: time.Second, Width: 300, Series: series})
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile(`<rect x="[^"]*" y="([^"]*)"`).FindAllStringSubmatch(svg, -1) {
		rows[m[1]] = true
	}
	if len(rows) != 2 {
		t.Errorf("legend rows at %v, want 2:\n%s", rows, svg)
	}
	// Below a title (20) and two rows (32), the plot's top is at 60.
	if lines := polylines(svg); len(lines) != 6 || !strings.HasSuffix(lines[0], ",60.0") {
		t.Errorf("polylines %q, want 6 reaching the top at y 60:\n%s", lines, svg)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "|") == strings.Join(b, "|") }
