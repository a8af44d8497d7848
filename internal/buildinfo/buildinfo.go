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

// Read returns the build information of the running binary.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", Revision: "unknown", GoVersion: "unknown"}
	}
	return fromBuildInfo(bi)
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
