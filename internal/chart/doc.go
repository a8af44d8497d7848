// Package chart draws line charts over time as inline SVG, for the status
// page: server-rendered, no script, no external file, each chart one
// <svg> element to write into the HTML as it is.
//
// It owns the drawing: the scales, the axes and their labels, the legend,
// the lines, and the escaping of every text it writes. It does not own the
// data: what is sampled, how often and for how long is the caller's (the
// status page keeps a ring of samples per pipeline, package app).
//
// The entry point is Chart.SVG: a Chart names its title, the unit of its
// values, the times of its points, the span of its x axis up to End, and
// its series.
//
// # Guarantees
//
//   - The x axis shows the Span up to End, ticked at a round step (at most
//     6 intervals: "−15 min", "−10 min", "−5 min", "now" for 15 minutes) and
//     captioned with the span ("last 15 min"); a point before End − Span is
//     not drawn, one after End is drawn at End.
//   - The y axis starts at 0 and ends at a round value at or above the
//     largest value drawn (1, 2 or 5 times a power of ten per tick); the
//     unit is written along it. All zeros, or no value at all, make an axis
//     from 0 to 1.
//   - A value that is NaN or infinite is no value: its line breaks there
//     (a point between two gaps is drawn as a dot). A negative value is
//     drawn at 0: the charts are of rates, lags and ages, which a negative
//     can only be through a clock step or a counter reset.
//   - With fewer than two times, or no value to draw in the span, the plot
//     holds the chart's Empty text instead of lines ("no data" if unset);
//     the axes and the legend are drawn all the same.
//   - A chart of more than one series has a legend, wrapped onto as many
//     rows as its width needs; each series is a <g class="series"> whose
//     <title> (a tooltip) and data-name are the series' name.
//   - Every text and attribute written (title, unit, names, colours, Empty)
//     is escaped, so the output is well-formed XML and safe in HTML
//     whatever the strings hold.
//   - SVG allocates its output and a few strings; it keeps nothing, does
//     not modify the slices it is given, and is safe for concurrent use.
//
// # Errors
//
// There are none: every input draws something, as the guarantees say.
package chart
