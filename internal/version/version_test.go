package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	in := Get()
	if in.GoVersion == "" || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("Get() = %+v", in)
	}
	if in.SnapshotFormat != SnapshotFormat || in.CheckpointFormat != CheckpointFormat {
		t.Fatalf("formats %d, %d", in.SnapshotFormat, in.CheckpointFormat)
	}
	if !strings.HasPrefix(in.String(), "raftps "+in.Version+" (") {
		t.Fatalf("String() = %q", in.String())
	}
}

func TestLdflagsVersionWins(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "v9.8.7"
	if got := Get().Version; got != "v9.8.7" {
		t.Fatalf("Version with -X stamp = %q, want v9.8.7", got)
	}
}
