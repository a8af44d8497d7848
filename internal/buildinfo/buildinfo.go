package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Info identifies a build.
type Info struct {
	// Version is the main module's version: a tag such as v1.2.3 for a
	// binary built by `go install …@v1.2.3`, "(devel)" for one built from
	// a checkout.
	Version string
	// Revision is the VCS commit the binary was built from, with
	// "-dirty" when the tree had uncommitted changes; "unknown" when the
	// build recorded none (go run, go test, a tree without .git).
	Revision string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// version and revision, when set at link time, take the place of what the
// build recorded: a build without the repository (a Docker build context
// without .git, GOFLAGS=-buildvcs=false) records no revision. The
// Dockerfile sets both:
//
//	-ldflags "-X github.com/pubsink/pubsink/internal/buildinfo.version=v1.2.3
//	          -X github.com/pubsink/pubsink/internal/buildinfo.revision=abc123"
var version, revision string

// Read returns the build information of the running binary.
func Read() Info {
	info := Info{Version: "unknown", Revision: "unknown", GoVersion: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info = fromBuildInfo(bi)
	}
	if version != "" {
		info.Version = version
	}
	if revision != "" {
		info.Revision = revision
	}
	return info
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Version: bi.Main.Version, Revision: "unknown", GoVersion: bi.GoVersion}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && info.Revision != "unknown" {
		info.Revision += "-dirty"
	}
	return info
}

// String is the line `pubsink version` prints.
func (i Info) String() string {
	return fmt.Sprintf("pubsink %s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}
