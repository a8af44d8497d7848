package source

import "time"

// Message is the envelope a Source hands downstream: a plain copy of what
// Pub/Sub delivered, with no handle on the client. The handler owns it until
// it returns and must not retain Data or Attributes afterwards.
type Message struct {
	ID              string
	Data            []byte
	Attributes      map[string]string
	PublishTime     time.Time
	OrderingKey     string
	DeliveryAttempt int // 0 when the subscription has no dead-letter policy
	ReceivedAt      time.Time
}
