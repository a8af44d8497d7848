package setupplan

import (
	"fmt"
	"strings"
	"time"
)

// The phrases that name an object in setup's lines and in the plan's text
// ("created " or "would create " before them): one wording for both.

// DescribeTopic names a topic with what it is created with: its schema
// and encoding (schema "": none) and its message retention (0: none).
func DescribeTopic(name string, retention time.Duration, schema, encoding string) string {
	var what []string
	if schema != "" {
		what = append(what, fmt.Sprintf("schema %s, encoding %s", schema, encoding))
	}
	if retention > 0 {
		what = append(what, fmt.Sprintf("message retention %v", retention))
	}
	if len(what) == 0 {
		return "topic " + name
	}
	return fmt.Sprintf("topic %s (%s)", name, strings.Join(what, "; "))
}

// DescribeSchema names a topic schema, its type and its file.
func DescribeSchema(s *Schema) string {
	return fmt.Sprintf("schema %s (%s, from %s)", s.Name, s.Type, s.File)
}

// DescribeSubscription names a subscription, its topic and its ordering.
func DescribeSubscription(s Subscription) string {
	if s.Ordering {
		return fmt.Sprintf("subscription %s on %s (message ordering)", s.Name, s.Topic)
	}
	return fmt.Sprintf("subscription %s on %s", s.Name, s.Topic)
}

// DescribeTable names a table and its instance.
func DescribeTable(t Table) string { return fmt.Sprintf("table %s in instance %s", t.Name, t.Instance) }

// DescribeFamily names a column family of table, with its GC rule when
// withRule is set and it has one.
func DescribeFamily(table string, f Family, withRule bool) string {
	if withRule && f.GC != nil {
		return fmt.Sprintf("column family %s:%s (GC rule %s)", table, f.Name, f.GC)
	}
	return fmt.Sprintf("column family %s:%s", table, f.Name)
}
