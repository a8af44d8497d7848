package batch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pubsink/pubsink/internal/batch"
)

// Each caller blocks until its batch was flushed and gets its own item's
// error.
func ExampleNew() {
	b := batch.New(batch.Config{MaxItems: 3, MaxDelay: 10 * time.Millisecond},
		func(ctx context.Context, words []string) []error {
			errs := make([]error, len(words))
			for i, w := range words {
				if strings.ContainsAny(w, "0123456789") {
					errs[i] = fmt.Errorf("%q is not a word", w)
				}
			}
			return errs
		})

	words := []string{"alpha", "b3ta", "gamma"}
	errs := make([]error, len(words))
	var wg sync.WaitGroup
	for i, w := range words {
		wg.Go(func() { errs[i] = b.Add(context.Background(), w, len(w)) })
	}
	wg.Wait()
	if err := b.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	for i, w := range words {
		fmt.Println(w, errs[i])
	}
	// Output:
	// alpha <nil>
	// b3ta "b3ta" is not a word
	// gamma <nil>
}
