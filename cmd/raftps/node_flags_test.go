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

// TestHelpNamesEnv (issue 37): --help names the RAFTPS_* variable beside
// every flag that reads one, shows its value as the default when it is
// set, and leaves the client flags out of node, tls and dev.
func TestHelpNamesEnv(t *testing.T) {
	t.Setenv("RAFTPS_ENDPOINTS", "10.9.9.9:7000")
	out, err := runOffline(t, "kv", "get", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"endpoints", "command-timeout", "dial-timeout", "output", "write-out", "cacert", "cert", "key"} {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && (f[0] == "--"+flag || f[1] == "--"+flag) {
				line = l
			}
		}
		if !strings.Contains(line, envName(flag)) {
			t.Errorf("kv get --help: the --%s line %q does not name %s", flag, line, envName(flag))
		}
	}
	if !strings.Contains(out, "(default 10.9.9.9:7000)") {
		t.Errorf("kv get --help with RAFTPS_ENDPOINTS=10.9.9.9:7000 does not show it as --endpoints' default:\n%s", out)
	}
	for _, cmd := range [][]string{{"node", "--help"}, {"tls", "cert", "create", "--help"}, {"dev", "--help"}} {
		out, err := runOffline(t, cmd...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "--endpoints") || strings.Contains(out, "--cacert") {
			t.Errorf("%v lists the client flags:\n%s", cmd, out)
		}
		if cmd[0] == "node" && !strings.Contains(out, "RAFTPS_TLS_CA_FILE") {
			t.Errorf("node --help does not name RAFTPS_TLS_CA_FILE:\n%s", out)
		}
	}
	// The flags are whole again after a help that hid them.
	if out, _ := runOffline(t, "kv", "get", "--help"); !strings.Contains(out, "--endpoints") {
		t.Errorf("kv get --help after node --help lacks --endpoints")
	}
}

// TestRaftLogStoreFlag: --raft-log-store takes boltdb or wal; anything
// else is refused before the node starts, naming both.
func TestRaftLogStoreFlag(t *testing.T) {
	_, err := runOffline(t, "node", "--insecure", "--id", "x", "--data-dir", t.TempDir(), "--raft-log-store", "rocksdb")
	if err == nil || !strings.Contains(err.Error(), `--raft-log-store "rocksdb": want boltdb or wal`) {
		t.Fatalf("raftps node --raft-log-store rocksdb: %v; want the two stores named", err)
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
