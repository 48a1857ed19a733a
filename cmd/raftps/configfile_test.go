package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "raftps.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The file sets flags; a flag on the command line wins.
func TestConfigFileFlagsOverride(t *testing.T) {
	c := newNodeCmd(&globals{out: io.Discard, err: io.Discard})
	fs := c.Flags()
	if err := fs.Parse([]string{"--id", "from-cli"}); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "id: from-file\ndata-dir: /var/lib/raftps\njoin: [a:7002, b:7002]\nbootstrap-expect: 3\nforce-new-cluster: true\nelection-timeout: 2000\n")
	if err := applyConfigFile(fs, p); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	if get("id") != "from-cli" || get("data-dir") != "/var/lib/raftps" || get("bootstrap-expect") != "3" ||
		get("force-new-cluster") != "true" || get("election-timeout") != "2000" {
		t.Fatalf("id %q data-dir %q bootstrap-expect %q force %q election %q", get("id"), get("data-dir"),
			get("bootstrap-expect"), get("force-new-cluster"), get("election-timeout"))
	}
	join, _ := fs.GetStringSlice("join")
	if !reflect.DeepEqual(join, []string{"a:7002", "b:7002"}) {
		t.Fatalf("join %q", join)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for name, body := range map[string]string{
		"unknown key": "id: n1\nbogus: 1\n",
		"bad value":   "bootstrap-expect: three\n",
		"nested map":  "join: {a: b}\n",
		"not yaml":    "id: [\n",
		"itself":      "config-file: other.yaml\n",
	} {
		c := newNodeCmd(&globals{out: io.Discard, err: io.Discard})
		if err := applyConfigFile(c.Flags(), writeFile(t, body)); !errors.Is(err, ErrConfigFile) {
			t.Errorf("%s: %v, want ErrConfigFile", name, err)
		}
	}
}

// The config file shipped for systemd applies as it is.
func TestShippedConfigFile(t *testing.T) {
	c := newNodeCmd(&globals{out: io.Discard, err: io.Discard})
	if err := applyConfigFile(c.Flags(), filepath.Join("..", "..", "deploy", "systemd", "raftps.yaml")); err != nil {
		t.Fatal(err)
	}
	if v := c.Flags().Lookup("bootstrap-expect").Value.String(); v != "3" {
		t.Fatalf("bootstrap-expect %s", v)
	}
}

// raft-log-store is settable in the config file like its flag.
func TestConfigFileRaftLogStore(t *testing.T) {
	c := newNodeCmd(&globals{out: io.Discard, err: io.Discard})
	fs := c.Flags()
	if err := applyConfigFile(fs, writeFile(t, "raft-log-store: wal\n")); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("raft-log-store").Value.String(); got != "wal" {
		t.Fatalf("raft-log-store from the file = %q, want wal", got)
	}
}
