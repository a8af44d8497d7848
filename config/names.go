package config

import "strings"

// SubscriptionName returns the full name projects/P/subscriptions/S of a
// subscription written as a short name S in c.Project; a full name is
// returned as is.
func (c *Config) SubscriptionName(short string) string {
	if strings.HasPrefix(short, "projects/") {
		return short
	}
	return "projects/" + c.Project + "/subscriptions/" + short
}

// TopicName returns the full name projects/P/topics/T of a topic written as a
// short name T in c.Project; a full name is returned as is.
func (c *Config) TopicName(short string) string {
	if strings.HasPrefix(short, "projects/") {
		return short
	}
	return "projects/" + c.Project + "/topics/" + short
}

// DedupeKeyAttribute returns the attribute whose value is the message's
// dedupe key, or "" when the key is the Pub/Sub message ID.
func (p *Pipeline) DedupeKeyAttribute() string { return p.Source.IDAttribute }

// KeyIsMessageID reports whether the dedupe key is the Pub/Sub message ID
// (no source.id_attribute nor source.id_template): then no two messages
// share a key, and no key has a rival.
func (p Pipeline) KeyIsMessageID() bool {
	return p.Source.IDAttribute == "" && p.Source.IDTemplate == ""
}

// ExactlyOnce reports whether the pipeline dedupes (mode exactly_once).
func (p Pipeline) ExactlyOnce() bool { return p.Mode == ModeExactlyOnce }
