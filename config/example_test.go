package config_test

import (
	"errors"
	"fmt"

	"github.com/pubsink/pubsink/config"
)

func ExampleParse() {
	_, err := config.Parse([]byte(`
project: my-project
state: {instance: my-instance}
pipelines:
  - name: orders
    source: {subscription: orders-pubsink, id_attribute: order_id}
    sink:
      table: orders
      row_key: "{atributes.customer_id}#{attributes.order_id}"
      colums: {amount: "{data.amount}"}
`))
	var problems config.Problems
	if errors.As(err, &problems) {
		for _, p := range problems {
			fmt.Println(p)
		}
	}
	// Output:
	// pipelines[0].sink.row_key: unknown placeholder "{atributes.customer_id}" (line 9)
	// pipelines[0].sink.colums: unknown key; did you mean columns? (line 10)
}
