package version

import (
	"runtime"
	"runtime/debug"
	"time"
)

// Version, Revision, CommitTime and Modified are stamped by `make build`
// and `make release` from git with
// -ldflags "-X github.com/raftps/raftps/internal/version.Version=v1.2.3 ..."
// (Version: `git describe --tags --always --dirty`; Revision: the commit
// hash; CommitTime: its RFC 3339 commit time; Modified: "true" if the work
// tree had changes). Each empty one is taken from the build info that
// `go build` records, which has no VCS stamp under -buildvcs=false or
// outside a git work tree.
var Version, Revision, CommitTime, Modified string

// Formats of the files this build writes (each also readable back to 1).
const (
	// SnapshotFormat is the version of a `raftps snapshot save` file
	// (raftstore.SnapshotFileVersion).
	SnapshotFormat = 1
	// CheckpointFormat is the version of a checkpoint export
	// (pserver/checkpoint's export header).
	CheckpointFormat = 1
)

// Info is the build's identity (`raftps version -w json`; the labels of
// raftps_build_info).
type Info struct {
	// Version is the release version ("v1.2.3"), the module version, or
	// "(devel)" for a build from a work tree.
	Version string `json:"version"`
	// Revision is the VCS commit ("unknown" if not stamped); Modified is
	// true if the work tree had changes.
	Revision string `json:"revision"`
	Modified bool   `json:"modified"`
	// Time is the commit time (RFC 3339), "" if not stamped.
	Time      string `json:"time"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
	// SnapshotFormat and CheckpointFormat are the newest formats this
	// build reads and writes.
	SnapshotFormat   int `json:"snapshot_format"`
	CheckpointFormat int `json:"checkpoint_format"`
}

// Get returns the build's Info.
func Get() Info {
	in := Info{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, SnapshotFormat: SnapshotFormat, CheckpointFormat: CheckpointFormat}
	if bi, ok := debug.ReadBuildInfo(); ok {
		in.GoVersion = bi.GoVersion
		if bi.Main.Version != "" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			case "vcs.time":
				if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
					in.Time = t.UTC().Format(time.RFC3339)
				}
			}
		}
	}
	if Version != "" {
		in.Version = Version
	}
	if Revision != "" {
		in.Revision = Revision
	}
	if t, err := time.Parse(time.RFC3339, CommitTime); err == nil {
		in.Time = t.UTC().Format(time.RFC3339)
	}
	if Modified != "" {
		in.Modified = Modified == "true"
	}
	return in
}

// String is "raftps v1.2.3 (abc1234, go1.26.8 linux/amd64)".
func (in Info) String() string {
	rev := in.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if in.Modified {
		rev += "+dirty"
	}
	return "raftps " + in.Version + " (" + rev + ", " + in.GoVersion + " " + in.Platform + ")"
}
