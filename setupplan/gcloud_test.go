package setupplan

import (
	"strings"
	"testing"
)

// TestGcloudOfTheExamplesCreatesEachObjectOnce: the commands of
// examples.yaml create each topic, subscription, table and family once, in
// setup's order, with setup's settings.
func TestGcloudOfTheExamplesCreatesEachObjectOnce(t *testing.T) {
	got := string(Gcloud(New(load(t, "../examples.yaml")), "p"))
	lines := strings.Split(got, "\n")
	index := func(want string) int {
		for i, l := range lines {
			if l == want {
				return i
			}
		}
		t.Errorf("no line %q in:\n%s", want, got)
		return -1
	}
	topic := index("gcloud pubsub topics create projects/p/topics/orders")
	sub := index("gcloud pubsub subscriptions create projects/p/subscriptions/orders-pubsink --topic=projects/p/topics/orders --ack-deadline=60 --expiration-period=never --min-retry-delay=1s --max-retry-delay=5s")
	index("gcloud pubsub subscriptions create projects/p/subscriptions/orders-pubsink-tracking --topic=projects/p/topics/orders --ack-deadline=10 --expiration-period=never")
	index("gcloud pubsub subscriptions create projects/p/subscriptions/dbserver1.inventory.customers-pubsink --topic=projects/p/topics/dbserver1.inventory.customers --ack-deadline=60 --expiration-period=never --enable-message-ordering --min-retry-delay=1s --max-retry-delay=5s")
	table := index("cbt -project p -instance i createtable customers")
	index("cbt -project p -instance i setgcpolicy customers tombstone maxage=168h")
	index("cbt -project p -instance i setgcpolicy pubsink_state m maxversions=1")
	if !(topic < sub && sub < table) {
		t.Errorf("not in setup's order: topic at %d, subscription at %d, table at %d", topic, sub, table)
	}
	if n := strings.Count(got, "createtable pubsink_state\n"); n != 1 {
		t.Errorf("the state table is created %d times", n)
	}
}

func TestShellQuoteKeepsAWordWhole(t *testing.T) {
	for in, want := range map[string]string{
		"projects/p/topics/a.b-c": "projects/p/topics/a.b-c",
		"/tmp/my schemas/x.avsc":  "'/tmp/my schemas/x.avsc'",
		"it's":                    `'it'\''s'`,
		"":                        "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
