package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

const goBenchOutput = `goos: linux
goarch: amd64
pkg: github.com/raftps/raftps/pserver
cpu: Intel(R) Xeon(R) CPU @ 2.20GHz
BenchmarkPushPull/unary/trainers=1-2         	       3	 412345678 ns/op	 194.04 MB/s	       120.5 MB/cpu-s
BenchmarkPushPull/stream/trainers=4-2        	       1	1412345678 ns/op	 226.60 MB/s
BenchmarkGRPCEcho-2   	       3	 212345678 ns/op	 376.74 MB/s	 201.0 MB/cpu-s
BenchmarkCheckpointVsFile-2   3   100 ns/op   88.5 ckpt_MB/s   101.2 file_MB/s   0.874 ckpt/file
BenchmarkTrainLocal/hashed_lr-16   1   5 ns/op   1.5e+05 examples/s
--- SKIP: BenchmarkRestoreLocal
    bench_test.go:12: dataset missing
BenchmarkBroken-2   notanumber   1 ns/op
PASS
ok  	github.com/raftps/raftps/pserver	12.345s
`

func TestParseGoBench(t *testing.T) {
	got := ParseGoBench(goBenchOutput)
	if len(got) != 5 {
		t.Fatalf("parsed %d results, want 5: %+v", len(got), got)
	}
	tests := []struct {
		name, unit string
		want       float64
	}{
		{"PushPull/unary/trainers=1", "MB/s", 194.04},
		{"PushPull/unary/trainers=1", "MB/cpu-s", 120.5},
		{"PushPull/unary/trainers=1", "ns/op", 412345678},
		{"PushPull/stream/trainers=4", "MB/s", 226.60},
		{"GRPCEcho", "MB/s", 376.74},
		{"CheckpointVsFile", "ckpt/file", 0.874},
		{"TrainLocal/hashed_lr", "examples/s", 1.5e5},
	}
	for _, tc := range tests {
		t.Run(tc.name+" "+tc.unit, func(t *testing.T) {
			if v := Find(got, tc.name, tc.unit); v != tc.want {
				t.Errorf("Find(%q, %q) = %v, want %v", tc.name, tc.unit, v, tc.want)
			}
		})
	}
	if got[0].Procs != 2 || got[0].N != 3 || got[4].Procs != 16 {
		t.Errorf("procs/N: %+v %+v", got[0], got[4])
	}
	if v := Find(got, "Missing", "MB/s"); !math.IsNaN(v) {
		t.Errorf("missing benchmark = %v, want NaN", v)
	}
	if v := Find(got, "GRPCEcho", "examples/s"); !math.IsNaN(v) {
		t.Errorf("missing unit = %v, want NaN", v)
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{NA, "n/a"}, {0, "0"}, {12345.6, "12346"}, {123.4, "123"}, {12.34, "12.3"},
		{1.234, "1.23"}, {0.1234, "0.123"}, {0.001234, "0.00123"}, {-5.5, "-5.50"},
	}
	for _, tc := range tests {
		if got := FormatValue(tc.in); got != tc.want {
			t.Errorf("FormatValue(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := FormatRatio(0.5); got != "0.500x" {
		t.Errorf("FormatRatio(0.5) = %q", got)
	}
	if got := FormatRatio(NA); got != "n/a" {
		t.Errorf("FormatRatio(NaN) = %q", got)
	}
}

func testRows() []Row {
	return []Row{
		{Section: "metadata store", Metric: "put 256B, 1 client throughput", Unit: "ops/s", Ours: 800, BaseName: "etcd", Base: 1000},
		{Section: "metadata store", Metric: "put 256B, 1 client p50", Unit: "ms", Ours: 1.25, BaseName: "etcd", Base: 1},
		{Section: "failover", Metric: "leader SIGKILL -> first write", Unit: "s", Ours: 2.5, BaseName: "etcd", Base: NA, Note: "median of 5"},
		{Section: "recovery in training", Metric: "trainer SIGKILL -> TASK_REQUEUED", Unit: "s", Ours: 3, Base: NA},
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := WriteTable(&b, testRows()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// header, rule, 2 kv rows, blank, failover, blank, recovery
	if len(lines) != 8 {
		t.Fatalf("%d lines, want 8:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[0], "SECTION") || strings.Trim(lines[1], "-") != "" {
		t.Errorf("header/rule wrong:\n%s", out)
	}
	if lines[4] != "" || lines[6] != "" {
		t.Errorf("sections not separated by blank lines:\n%s", out)
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing blank in %q", l)
		}
	}
	// Columns line up: RATIO ends at the same column on every data line.
	col := strings.Index(lines[0], "RATIO") + len("RATIO")
	for _, l := range []string{lines[2], lines[3], lines[5], lines[7]} {
		if len(l) < col || l[col-1] == ' ' {
			t.Errorf("ratio not right-aligned at column %d in %q", col, l)
		}
	}
	for _, want := range []string{"0.800x", "1.250x", "ms (lower better)", "n/a", "median of 5"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(lines[7], "  -  ") {
		t.Errorf("row without baseline should show -: %q", lines[7])
	}
}

func TestWriteMarkdownTable(t *testing.T) {
	var b strings.Builder
	if err := WriteMarkdownTable(&b, testRows()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+len(testRows()) {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	want := strings.Count(lines[0], "|")
	for _, l := range lines {
		if strings.Count(l, "|") != want {
			t.Errorf("column count differs: %q", l)
		}
	}
}

func TestRowJSON(t *testing.T) {
	js, err := json.Marshal(testRows()[2])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if m["baseline"] != nil || m["ratio"] != nil || m["raftps"] != 2.5 || m["lower_is_better"] != true {
		t.Errorf("json = %s", js)
	}
}

func TestWorkloadNames(t *testing.T) {
	if got := PutWorkload(1).Name; got != "put 256B, 1 client" {
		t.Errorf("PutWorkload(1).Name = %q", got)
	}
	if got := CASWorkload(16).Name; got != "CAS txn, 16 clients" {
		t.Errorf("CASWorkload(16).Name = %q", got)
	}
}

func TestPercentileMedian(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	if p := Percentile(ds, 0.5); p != 50 {
		t.Errorf("p50 = %v", p)
	}
	if p := Percentile(ds, 0.99); p != 99 {
		t.Errorf("p99 = %v", p)
	}
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v", m)
	}
	if m := Median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median = %v", m)
	}
}

const pprofTop = `File: raftstore.test
Type: cpu
Duration: 5.01s, Total samples = 4.50s (89.82%)
Showing nodes accounting for 4.50s, 100% of 4.50s total
      flat  flat%   sum%        cum   cum%
     1.20s 26.67% 26.67%      1.20s 26.67%  syscall.Syscall6
     450ms 10.00% 36.67%      900ms 20.00%  runtime.mallocgc
      90ms  2.00% 38.67%      2.1s 46.67%  github.com/hashicorp/raft.(*Raft).runLeader
`

func TestParsePprofTop(t *testing.T) {
	ls := ParsePprofTop(pprofTop)
	if len(ls) != 3 {
		t.Fatalf("parsed %d lines: %+v", len(ls), ls)
	}
	if ls[1].Flat != 0.45 || ls[1].CumPct != 20 || ls[2].Func != "github.com/hashicorp/raft.(*Raft).runLeader" {
		t.Errorf("%+v", ls)
	}
	cats := Categorize(ls)
	if cats[0][0] != "syscalls (fsync, socket read/write)" || cats[0][1] != "26.7%" {
		t.Errorf("categories %v", cats)
	}
}

// TestLogStoreMeasured: the profile's text states the raft-wal rows of the
// run and scales the 1-client put row by them; without the rows it says
// nothing.
func TestLogStoreMeasured(t *testing.T) {
	r := &runner{rep: &Report{}}
	if got := r.logStoreMeasured(); got != "" {
		t.Fatalf("no rows: %q, want nothing", got)
	}
	r.add(pairRow(Row{Metric: LogStoreRow(1), Unit: "ops/s"}, []float64{2000, 2200, 1900}, []float64{1000, 1000, 1000}))
	r.add(pairRow(Row{Metric: PutWorkload(1).Name + " throughput", Unit: "ops/s"}, []float64{700, 700, 700}, []float64{1000, 1000, 1000}))
	got := r.logStoreMeasured()
	for _, want := range []string{"reach 2.000x (1.900x to 2.200x)", "row is 0.700x of etcd", "about 1.400x"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
