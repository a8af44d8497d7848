package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want Info
	}{
		{"a tagged install", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}},
			Info{"v1.2.3", "abc123", "go1.26.8"}},
		{"a dirty checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			Info{"(devel)", "abc123-dirty", "go1.26.8"}},
		{"no VCS stamp", debug.BuildInfo{GoVersion: "go1.26.8"}, Info{"(devel)", "unknown", "go1.26.8"}},
	}
	for _, c := range cases {
		if got := fromBuildInfo(&c.bi); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := (Info{"v1.2.3", "abc123", "go1.26.8"}).String(); got != "pubsink v1.2.3 (revision abc123, go1.26.8)" {
		t.Errorf("String = %q", got)
	}
}
