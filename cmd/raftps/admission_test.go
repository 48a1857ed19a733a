package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSubmitHugeModelRefused (issue 12 item 11): `raftps job submit
// --hidden 1000000000` (784x10^9 parameters) is refused at submit through
// the real CLI and gRPC with InvalidArgument naming the field (the width
// bound), and widths within the bound whose product passes the cluster's
// cap (--hidden 1048576,1048576: 2^40 parameters) with InvalidArgument
// naming jobq.MaxJobBytes; no job is created.
func TestSubmitHugeModelRefused(t *testing.T) {
	n := mustNode(t)
	ds, _ := filepath.Abs(filepath.Join("..", "..", "datasets", "fashion-mnist"))
	for hidden, want := range map[string]string{"1000000000": "model.hidden[0]", "1048576,1048576": "MaxJobBytes"} {
		_, err := run(t, n, "job", "submit", "--name", "huge", "--hidden", hidden, "--dataset", ds)
		if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), want) {
			t.Fatalf("submit --hidden %s: %v, want InvalidArgument naming %s", hidden, err, want)
		}
		t.Logf("--hidden %s refused: %v", hidden, err)
		if _, err := run(t, n, "job", "status", "huge"); err == nil || !strings.Contains(err.Error(), "NotFound") {
			t.Fatalf("job after the refused submit: %v, want NotFound", err)
		}
	}
}
