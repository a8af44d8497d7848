package chart

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// Chart is a line chart of one or more series over the same times.
type Chart struct {
	// Title is written above the plot, and is the SVG's accessible name.
	Title string
	// Unit is the unit of the values, written along the y axis: "msg/s".
	Unit string
	// Times are the times of the points, oldest first: Series[i].Values[j]
	// is the value at Times[j].
	Times []time.Time
	// End is the right edge of the x axis ("now"), Span its length.
	End  time.Time
	Span time.Duration
	// Series are the lines, drawn in order (the last on top).
	Series []Series
	// Empty is written in the plot when there is nothing to draw (fewer
	// than two times, or no value in the span); "no data" if unset.
	Empty string
	// Width and Height are the SVG's size in pixels; 0: DefaultWidth,
	// DefaultHeight.
	Width, Height int
}

// Series is one line of a chart.
type Series struct {
	// Name is the series' label in the legend and its tooltip.
	Name string
	// Color is the line's SVG colour: "#2ca02c".
	Color string
	// Values are one per time of the chart; NaN or ±Inf is no value (a gap),
	// a missing value (Values shorter than Times) too, and a value past the
	// last time is ignored.
	Values []float64
}

// The default size fits three charts of a pipeline in a row of a
// 1280-pixel window.
const (
	DefaultWidth  = 360
	DefaultHeight = 200
)

// The layout, in pixels. charWidth is an estimate of a label character's
// advance at fontSize in a sans-serif face, used only to wrap the legend:
// too large wastes a little room, never overlaps.
const (
	fontSize     = 11
	charWidth    = 6.6
	titleHeight  = 20
	legendRow    = 16
	swatch       = 10
	marginLeft   = 54 // the unit, turned, and the y tick labels
	marginRight  = 14 // half the "now" label
	marginTop    = 8  // half a y tick label, above the plot
	marginBottom = 34 // the x tick labels and the caption
)

// SVG renders the chart as one <svg> element.
func (c Chart) SVG() template.HTML {
	w, h := c.Width, c.Height
	if w <= 0 {
		w = DefaultWidth
	}
	if h <= 0 {
		h = DefaultHeight
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s" font-family="system-ui, sans-serif" font-size="%d">`,
		w, h, w, h, esc(c.Title), fontSize)
	fmt.Fprintf(&b, `<title>%s</title><text x="0" y="14" font-size="12" font-weight="600" fill="#333">%s</text>`, esc(c.Title), esc(c.Title))
	top := titleHeight
	if len(c.Series) > 1 {
		top += c.legend(&b, top, w)
	}
	p := plot{left: marginLeft, top: float64(top + marginTop), right: float64(w - marginRight), bottom: float64(h - marginBottom),
		start: c.End.Add(-c.Span), span: c.Span}
	if p.bottom-p.top < 20 { // a height too small for its legend: keep a plot all the same
		p.bottom = p.top + 20
	}
	maxValue, drawable := c.extent(p)
	p.yTop, p.yStep = yScale(maxValue)
	p.axes(&b, c.Unit)
	if !drawable {
		empty := c.Empty
		if empty == "" {
			empty = "no data"
		}
		fmt.Fprintf(&b, `<text class="empty" x="%s" y="%s" text-anchor="middle" fill="#777">%s</text>`,
			num((p.left+p.right)/2), num((p.top+p.bottom)/2+4), esc(empty))
	} else {
		for _, s := range c.Series {
			p.series(&b, c.Times, s)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// legend writes the series' swatches and names from the top-left corner
// at y, wrapping at width w, and returns the height it took.
func (c Chart) legend(b *strings.Builder, y, w int) int {
	b.WriteString(`<g class="legend" fill="#333">`)
	x, rows := 0.0, 1
	for _, s := range c.Series {
		item := swatch + 4 + charWidth*float64(len([]rune(s.Name))) + 12
		if x > 0 && x+item > float64(w) {
			x, rows = 0, rows+1
		}
		ry := y + (rows-1)*legendRow
		fmt.Fprintf(b, `<rect x="%s" y="%d" width="%d" height="%d" fill="%s"/><text x="%s" y="%d">%s</text>`,
			num(x), ry+2, swatch, swatch, esc(s.Color), num(x+swatch+4), ry+11, esc(s.Name))
		x += item
	}
	b.WriteString(`</g>`)
	return rows * legendRow
}

// extent returns the largest value drawn, and whether anything is: two
// times at least, and a value at a time within the span.
func (c Chart) extent(p plot) (maxValue float64, drawable bool) {
	if len(c.Times) < 2 {
		return 0, false
	}
	for _, s := range c.Series {
		for j, v := range s.Values {
			if j >= len(c.Times) || !finite(v) || c.Times[j].Before(p.start) {
				continue
			}
			drawable = true
			maxValue = max(maxValue, v)
		}
	}
	return maxValue, drawable
}

// plot is the plot area in pixels and its scales.
type plot struct {
	left, top, right, bottom float64
	start                    time.Time
	span                     time.Duration
	yTop, yStep              float64
}

func (p plot) x(t time.Time) float64 {
	f := 1.0
	if p.span > 0 {
		f = min(float64(t.Sub(p.start))/float64(p.span), 1)
	}
	return p.left + f*(p.right-p.left)
}

func (p plot) y(v float64) float64 {
	return p.bottom - min(max(v, 0), p.yTop)/p.yTop*(p.bottom-p.top)
}

// axes writes the grid, the tick labels, the unit and the span.
func (p plot) axes(b *strings.Builder, unit string) {
	b.WriteString(`<g class="axes" fill="#555">`)
	for i := 0; i <= 10; i++ { // yScale makes 5 ticks at most: 10 bounds a bad scale's
		v := float64(i) * p.yStep
		if v > p.yTop*(1+1e-9) {
			break
		}
		y := num(p.y(v))
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e4e4e4"/><text x="%s" y="%s" text-anchor="end">%s</text>`,
			num(p.left), y, num(p.right), y, num(p.left-5), num(p.y(v)+4), label(v, p.yStep, p.yTop))
	}
	step := tickStep(p.span)
	for d := time.Duration(0); step > 0 && d <= p.span; d += step {
		x := num(p.x(p.start.Add(p.span - d)))
		text := "now"
		if d > 0 {
			text = "−" + duration(d)
		}
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999"/><text x="%s" y="%s" text-anchor="middle">%s</text>`,
			x, num(p.bottom), x, num(p.bottom+4), x, num(p.bottom+16), text)
	}
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999"/>`, num(p.left), num(p.bottom), num(p.right), num(p.bottom))
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">last %s</text>`, num((p.left+p.right)/2), num(p.bottom+30), duration(p.span))
	fmt.Fprintf(b, `<text transform="translate(12 %s) rotate(-90)" text-anchor="middle">%s</text>`, num((p.top+p.bottom)/2), esc(unit))
	b.WriteString(`</g>`)
}

// series writes one series: a polyline per run of values, a dot for a
// value alone between gaps.
func (p plot) series(b *strings.Builder, times []time.Time, s Series) {
	fmt.Fprintf(b, `<g class="series" data-name="%s"><title>%s</title>`, esc(s.Name), esc(s.Name))
	var run []string
	flush := func() {
		switch len(run) {
		case 0:
		case 1:
			x, y, _ := strings.Cut(run[0], ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="2" fill="%s"/>`, x, y, esc(s.Color))
		default:
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round" points="%s"/>`,
				esc(s.Color), strings.Join(run, " "))
		}
		run = run[:0]
	}
	for j, t := range times {
		if j >= len(s.Values) || !finite(s.Values[j]) || t.Before(p.start) {
			flush()
			continue
		}
		run = append(run, num(p.x(t))+","+num(p.y(s.Values[j])))
	}
	flush()
	b.WriteString(`</g>`)
}

// yScale returns the top of the y axis and its tick step for values up to
// maxValue: the step is 1, 2 or 5 times a power of ten, about a quarter
// of maxValue, and the top the first step at or above maxValue. A maxValue
// that is not above 0 makes the axis 0 to 1.
func yScale(maxValue float64) (top, step float64) {
	if !(maxValue > 0) || math.IsInf(maxValue, 1) {
		maxValue = 1
	}
	raw := maxValue / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return math.Ceil(maxValue/step-1e-9) * step, step
}

// label formats a y tick value with as many decimals as its step needs;
// on an axis whose top is 10,000 or more, in thousands (k) or, from
// 10,000,000, millions (M), so that a label stays short.
func label(v, step, top float64) string {
	suffix := ""
	switch {
	case top >= 1e7:
		v, step, suffix = v/1e6, step/1e6, "M"
	case top >= 1e4:
		v, step, suffix = v/1e3, step/1e3, "k"
	}
	if v == 0 {
		return "0"
	}
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if decimals > 0 { // 0.5, 1, 1.5: no "1.0"
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s + suffix
}

// tickSteps are the x axis's steps, the first giving at most 6 intervals
// taken.
var tickSteps = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
	30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
	30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

func tickStep(span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}
	for _, s := range tickSteps {
		if span/s <= 6 {
			return s
		}
	}
	return span / 4
}

// duration writes d in its largest whole unit: "15 min", "30 s", "2 h";
// else as Go does.
func duration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + " min"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + " s"
	}
	return d.String()
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// num writes a coordinate to a tenth of a pixel.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

func esc(s string) string { return html.EscapeString(s) }
