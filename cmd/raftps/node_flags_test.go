package main

import (
	"strings"
	"testing"
)

// TestNoGossipKeyFlag: the gossip key is not taken on the command line
// (where ps shows it); --gossip-keyring-file is the only way, and
// --gossip-key is refused as an unknown flag before a node starts.
func TestNoGossipKeyFlag(t *testing.T) {
	// --roles cook: a node that parsed --gossip-key fails its config check
	// instead of starting, so the old flag shows as the wrong error.
	_, err := runOffline(t, "node", "--insecure", "--id", "x", "--data-dir", t.TempDir(), "--roles", "cook",
		"--gossip-key", strings.Repeat("k", 32))
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --gossip-key") {
		t.Fatalf("raftps node --gossip-key: %v; want unknown flag", err)
	}
}

// TestRaftTimingFlags: --heartbeat-interval and --election-timeout take
// etcd's bare milliseconds, from the command line or the config file, and
// a pair that breaks etcd's 5x rule stops the node with etcd's advice
// before it starts.
func TestRaftTimingFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"below 5 heartbeats", []string{"--heartbeat-interval", "100", "--election-timeout", "400"},
			"--election-timeout 400 ms should be at least 5 times --heartbeat-interval 100 ms (at least 500 ms"},
		{"a unit", []string{"--election-timeout", "1s"}, `"1s": want a whole number of milliseconds > 0 (e.g. 100)`},
		{"from the config file", []string{"--config-file", writeFile(t, "heartbeat-interval: 300\n")},
			"--election-timeout 500 ms should be at least 5 times --heartbeat-interval 300 ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"node", "--insecure", "--id", "x", "--data-dir", t.TempDir()}, tc.args...)
			if _, err := runOffline(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("raftps %v: %v; want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}
