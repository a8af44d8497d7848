package template_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/pubsink/pubsink/template"
)

func Example() {
	// At start-up: compile once; a bad template fails here, not per message.
	rowKey, err := template.Compile("{attributes.customer_id}#{event_time:reverse}")
	if err != nil {
		panic(err)
	}
	amount, err := template.Compile("{data.amount}")
	if err != nil {
		panic(err)
	}

	// Per message: render into a reused buffer.
	in := &template.Input{
		MessageID:   "1001",
		PublishTime: time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC),
		EventTime:   time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		Attributes:  map[string]string{"customer_id": "c-42"},
		Data:        []byte(`{"amount": 12.50, "currency": "EUR"}`),
	}
	buf := make([]byte, 0, 128)
	buf, err = rowKey.AppendTo(buf[:0], in)
	fmt.Println(string(buf), err)
	buf, err = amount.AppendTo(buf[:0], in)
	fmt.Println(string(buf), err)

	// A message that cannot fill a placeholder: nothing is rendered, and the
	// error says which dead-letter reason applies.
	in.Attributes = nil
	buf, err = rowKey.AppendTo(buf[:0], in)
	fmt.Printf("%q %v missing_field=%v\n", buf, err, errors.Is(err, template.ErrMissingField))
	// Output:
	// c-42#9223370269531735807 <nil>
	// 12.50 <nil>
	// "" {attributes.customer_id}: missing field: attribute not set missing_field=true
}
