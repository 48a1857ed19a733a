package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

func TestPrinterFormats(t *testing.T) {
	resp := &pb.MembersResponse{Members: []*pb.Member{{Id: "n1", Status: "alive", Roles: []string{"server"}}}}
	header := []string{"ID", "STATUS", "ROLES"}
	rows := [][]string{{"n1", "alive", "server"}}
	for _, tc := range []struct {
		format string
		check  func(out string) bool
	}{
		{"", func(out string) bool { return out == "ID  STATUS  ROLES\nn1  alive   server\n" }},
		{"simple", func(out string) bool { return out == "ID  STATUS  ROLES\nn1  alive   server\n" }},
		{"table", func(out string) bool {
			return out == "+----+--------+--------+\n| ID | STATUS | ROLES  |\n+----+--------+--------+\n| n1 | alive  | server |\n+----+--------+--------+\n"
		}},
		{"json", func(out string) bool {
			// protojson: proto field names, zero values included.
			var v map[string][]map[string]any
			return json.Unmarshal([]byte(out), &v) == nil && len(v["members"]) == 1 &&
				v["members"][0]["id"] == "n1" && v["members"][0]["grpc_addr"] == ""
		}},
	} {
		var buf bytes.Buffer
		p, err := newPrinter(tc.format, &buf)
		if err != nil {
			t.Fatalf("%q: %v", tc.format, err)
		}
		if err := p.Table(resp, header, rows); err != nil {
			t.Fatal(err)
		}
		if !tc.check(buf.String()) {
			t.Errorf("-o %q table:\n%s", tc.format, buf.String())
		}
		buf.Reset()
		if err := p.Object(map[string]int{"term": 3}, func(w io.Writer) { io.WriteString(w, "term: 3\n") }); err != nil {
			t.Fatal(err)
		}
		want := "term: 3\n"
		if tc.format == "json" {
			want = "{\n  \"term\": 3\n}\n"
		}
		if buf.String() != want {
			t.Errorf("-o %q object: %q, want %q", tc.format, buf.String(), want)
		}
	}
}

// TestUnknownOutputFormat: an unknown --output/-w value fails before the
// command runs (no cluster is contacted: --endpoints points nowhere).
func TestUnknownOutputFormat(t *testing.T) {
	for _, flag := range []string{"-o", "--output", "-w", "--write-out"} {
		var out, errb bytes.Buffer
		root := newRootCmd(&out, &errb)
		root.SetArgs([]string{"--endpoints", "127.0.0.1:1", "--timeout", "100ms", flag, "yaml", "status"})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), `"yaml"`) || !strings.Contains(err.Error(), "simple, json or table") {
			t.Fatalf("%s yaml: %v, want an error naming the formats", flag, err)
		}
	}
}

// TestCommandList: every command group is registered once, from ctl.go.
func TestCommandList(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard)
	seen := map[string]int{}
	for _, c := range root.Commands() {
		seen[c.Name()]++
	}
	for _, name := range []string{"node", "kv", "lease", "members", "member", "endpoint", "status", "job", "train", "checkpoint", "demo", "snapshot", "version"} {
		if seen[name] != 1 {
			t.Errorf("command %q registered %d times", name, seen[name])
		}
	}
}

// TestJSONNumbers (issue 37): -w json prints 64-bit integers as numbers
// at every depth (lease grant's id and ttl, every header's revision and
// raft_term, a job's counters in a list), as kv get did; protojson quoted
// them.
func TestJSONNumbers(t *testing.T) {
	var buf bytes.Buffer
	p, err := newPrinter("json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []any{
		&pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: 12, RaftTerm: 3}, Id: 7587862416402393600, Ttl: 60},
		&pb.MembersResponse{Header: &pb.ResponseHeader{Revision: 12, RaftTerm: 3}, Members: []*pb.Member{{Id: "n1"}}},
		&pb.ListJobsResponse{Jobs: []*pb.JobStatus{{Name: "j", Done: 4, Checkpoints: []*pb.CheckpointPointer{{Version: 1000003842, KeptVersions: []int64{1000003800}}}}}},
	} {
		buf.Reset()
		if err := p.Object(m, nil); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if strings.Contains(out, `": "1`) || strings.Contains(out, `"12"`) || strings.Contains(out, `"3"`) || strings.Contains(out, `"4"`) || strings.Contains(out, `"60"`) {
			t.Errorf("%T -w json quotes an integer:\n%s", m, out)
		}
		var v map[string]any
		if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
			t.Fatalf("%T: %v\n%s", m, err, out)
		}
	}
	buf.Reset()
	_ = p.Object(&pb.LeaseGrantResponse{Id: 7587862416402393600, Ttl: 60}, nil)
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil || v["id"] != json.Number("7587862416402393600") || v["ttl"] != json.Number("60") {
		t.Errorf("lease grant -w json: %v %v; want id 7587862416402393600 and ttl 60 as numbers, every digit kept", v, err)
	}
}
