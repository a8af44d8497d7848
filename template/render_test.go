package template

import (
	"errors"
	"testing"
)

func TestRenderAgreesWithAppendTo(t *testing.T) {
	for _, src := range []string{
		"{message_id}",
		"{attributes.customer_id}",
		"{attributes.customer_id}#{event_time:reverse}",
		"{data.amount}",
		"{data}",
		"constant",
		"",
		"{attributes.order_id}-{attributes.order_id}-{attributes.order_id}-{attributes.order_id}-{attributes.order_id}-{attributes.order_id}-{attributes.order_id}", // past the stack buffer
	} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		want, err := tmpl.AppendTo(nil, benchInput)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(benchInput)
		if err != nil || got != string(want) {
			t.Errorf("%q: Render = %q, %v; AppendTo = %q", src, got, err, want)
		}
	}
}

func TestRenderMissingAttributeFailsAsAppendToDoes(t *testing.T) {
	for _, src := range []string{"{attributes.nope}", "x{attributes.nope}"} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		_, want := tmpl.AppendTo(nil, benchInput)
		got, err := tmpl.Render(benchInput)
		if got != "" || err == nil || err.Error() != want.Error() || !errors.Is(err, ErrMissingField) {
			t.Errorf("%q: Render = %q, %v; want the error %v", src, got, err, want)
		}
	}
}

func TestRenderOfALoneFieldDoesNotAllocate(t *testing.T) {
	for _, src := range []string{"{message_id}", "{attributes.customer_id}"} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = tmpl.Render(benchInput) }); n != 0 {
			t.Errorf("%q: %v allocations per Render, want 0", src, n)
		}
	}
}

func TestPayloadIsOnlyALoneData(t *testing.T) {
	for src, want := range map[string]bool{"{data}": true, "{data}{data}": false, "x{data}": false, "{data.a}": false, "{message_id}": false} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Payload(); got != want {
			t.Errorf("%q: Payload() = %v, want %v", src, got, want)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	for _, src := range []string{"{attributes.customer_id}", "{attributes.customer_id}#{event_time:reverse}"} {
		b.Run(src, func(b *testing.B) {
			tmpl, err := Compile(src)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(benchInput); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
