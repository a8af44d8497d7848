package setupplan

import (
	"encoding/json"
	"time"

	"github.com/pubsink/pubsink/internal/state"
)

// Status says what a plan found for an object: "exists", "would create",
// "would widen" or "drift: WHY (and the fix)". It is given the object's
// key: "topic NAME", "schema NAME", "subscription NAME", "table
// INSTANCE/TABLE" or "family INSTANCE/TABLE:FAMILY".
type Status func(key string) string

// JSON is the plan as data (docs/reference.md, "setup --plan"), each
// object with the status that status gives it, indented.
func JSON(p *Plan, status Status) ([]byte, error) {
	out := jsonPlan{Pipelines: []jsonPipeline{}}
	for _, pp := range p.Pipelines {
		jp := jsonPipeline{Name: pp.Name, Tables: []jsonTable{}}
		if pp.Err != nil {
			jp.Error = pp.Err.Error()
		}
		if pp.Topic != nil {
			jp.Topic = jsonTopicOf(*pp.Topic, status)
		}
		if pp.Err == nil {
			jp.Subscription = jsonSubscriptionOf(&pp.Subscription, status)
		}
		jp.Tracking = jsonSubscriptionOf(pp.Tracking, status)
		if pp.DeadLetterTopic != nil {
			jp.DeadLetterTopic = jsonTopicOf(*pp.DeadLetterTopic, status)
		}
		jp.DeadLetterSubscription = jsonSubscriptionOf(pp.DeadLetterSubscription, status)
		for _, t := range pp.Tables {
			jp.Tables = append(jp.Tables, jsonTableOf(t, status))
		}
		out.Pipelines = append(out.Pipelines, jp)
	}
	if p.State != nil {
		t := jsonTableOf(*p.State, status)
		out.State = &t
	}
	return json.MarshalIndent(out, "", "  ")
}

type jsonPlan struct {
	Pipelines []jsonPipeline `json:"pipelines"`
	State     *jsonTable     `json:"state_table,omitempty"`
}

type jsonPipeline struct {
	Name                   string            `json:"name"`
	Error                  string            `json:"error,omitempty"`
	Topic                  *jsonTopic        `json:"topic,omitempty"`
	Subscription           *jsonSubscription `json:"subscription,omitempty"`
	Tracking               *jsonSubscription `json:"tracking_subscription,omitempty"`
	DeadLetterTopic        *jsonTopic        `json:"dead_letter_topic,omitempty"`
	DeadLetterSubscription *jsonSubscription `json:"dead_letter_subscription,omitempty"`
	Tables                 []jsonTable       `json:"tables"`
}

type jsonTopic struct {
	Name             string      `json:"name"`
	Status           string      `json:"status"`
	RetentionSeconds int64       `json:"message_retention_seconds,omitempty"`
	Schema           *jsonSchema `json:"schema,omitempty"`
}

type jsonSchema struct {
	Name       string `json:"name"`
	Status     string `json:"status"`
	Type       string `json:"type"`
	File       string `json:"file"`
	Encoding   string `json:"encoding"`
	Definition string `json:"definition"`
}

type jsonSubscription struct {
	Name               string       `json:"name"`
	Status             string       `json:"status"`
	Topic              string       `json:"topic,omitempty"`
	AckDeadlineSeconds int64        `json:"ack_deadline_seconds"`
	RetryPolicy        *jsonBackoff `json:"retry_policy,omitempty"`
	MessageOrdering    bool         `json:"message_ordering"`
	// Expiration is "never": setup creates every subscription with an
	// expiration policy without a TTL.
	Expiration string `json:"expiration"`
}

type jsonBackoff struct {
	MinimumBackoffSeconds int64 `json:"minimum_backoff_seconds"`
	MaximumBackoffSeconds int64 `json:"maximum_backoff_seconds"`
}

type jsonTable struct {
	Instance string       `json:"instance"`
	Name     string       `json:"name"`
	Role     string       `json:"role"`
	Status   string       `json:"status"`
	Families []jsonFamily `json:"column_families"`
}

type jsonFamily struct {
	Name   string  `json:"name"`
	Status string  `json:"status"`
	GCRule *jsonGC `json:"gc_rule"`
}

type jsonGC struct {
	MaxAgeSeconds int64 `json:"max_age_seconds,omitempty"`
	MaxVersions   int   `json:"max_versions,omitempty"`
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

func jsonTopicOf(t Topic, status Status) *jsonTopic {
	jt := &jsonTopic{Name: t.Name, Status: status("topic " + t.Name), RetentionSeconds: seconds(t.Retention)}
	if s := t.Schema; s != nil {
		jt.Schema = &jsonSchema{Name: s.Name, Status: status("schema " + s.Name), Type: s.Type, File: s.File, Encoding: s.Encoding, Definition: s.Definition}
	}
	return jt
}

func jsonSubscriptionOf(s *Subscription, status Status) *jsonSubscription {
	if s == nil {
		return nil
	}
	js := &jsonSubscription{Name: s.Name, Status: status("subscription " + s.Name), Topic: s.Topic, AckDeadlineSeconds: seconds(s.AckDeadline), MessageOrdering: s.Ordering, Expiration: "never"}
	if s.Retry != nil {
		js.RetryPolicy = &jsonBackoff{seconds(s.Retry.Min), seconds(s.Retry.Max)}
	}
	return js
}

func jsonTableOf(t Table, status Status) jsonTable {
	jt := jsonTable{Instance: t.Instance, Name: t.Name, Role: t.Role, Status: status("table " + t.Instance + "/" + t.Name), Families: []jsonFamily{}}
	for _, f := range t.Families {
		jf := jsonFamily{Name: f.Name, Status: status("family " + t.Instance + "/" + t.Name + ":" + f.Name)}
		if age, ok := state.MaxAge(f.GC); ok {
			jf.GCRule = &jsonGC{MaxAgeSeconds: seconds(age)}
		} else if n, ok := MaxVersions(f); ok {
			jf.GCRule = &jsonGC{MaxVersions: n}
		}
		jt.Families = append(jt.Families, jf)
	}
	return jt
}
