package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PprofLine is one line of `go tool pprof -top`.
type PprofLine struct {
	Flat, FlatPct, Cum, CumPct float64 // seconds and percent
	Func                       string
}

// ParsePprofTop parses the function lines of `go tool pprof -top` output.
func ParsePprofTop(out string) []PprofLine {
	var res []PprofLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, e1 := parseSeconds(f[0])
		cum, e2 := parseSeconds(f[3])
		fp, e3 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cp, e4 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
			continue
		}
		res = append(res, PprofLine{Flat: flat, FlatPct: fp, Cum: cum, CumPct: cp, Func: strings.Join(f[5:], " ")})
	}
	return res
}

// parseSeconds parses pprof's "1.23s", "450ms", "10us", "0".
func parseSeconds(s string) (float64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "ms"):
		s, mult = strings.TrimSuffix(s, "ms"), 1e-3
	case strings.HasSuffix(s, "us"):
		s, mult = strings.TrimSuffix(s, "us"), 1e-6
	case strings.HasSuffix(s, "ns"):
		s, mult = strings.TrimSuffix(s, "ns"), 1e-9
	case strings.HasSuffix(s, "s"):
		s = strings.TrimSuffix(s, "s")
	}
	v, err := strconv.ParseFloat(s, 64)
	return v * mult, err
}

// profileCategories maps a function name prefix to where its time goes;
// the first match wins.
var profileCategories = []struct{ prefix, name string }{
	{"syscall.", "syscalls (fsync, socket read/write)"},
	{"internal/runtime/syscall", "syscalls (fsync, socket read/write)"},
	{"runtime/internal/syscall", "syscalls (fsync, socket read/write)"},
	{"runtime.futex", "scheduler wakeups (futex)"},
	{"runtime.mallocgc", "allocation and GC"},
	{"runtime.gc", "allocation and GC"},
	{"runtime.scanobject", "allocation and GC"},
	{"runtime.greyobject", "allocation and GC"},
	{"runtime.findObject", "allocation and GC"},
	{"runtime.markBits", "allocation and GC"},
	{"runtime.heapBits", "allocation and GC"},
	{"runtime.memclr", "allocation and GC"},
	{"runtime.sweep", "allocation and GC"},
	{"runtime.(*mspan)", "allocation and GC"},
	{"runtime.(*mheap)", "allocation and GC"},
	{"runtime.(*gcWork)", "allocation and GC"},
	{"runtime.wbBuf", "allocation and GC"},
	{"runtime.", "Go scheduler and other runtime"},
	{"google.golang.org/grpc", "gRPC"},
	{"golang.org/x/net/http2", "gRPC"},
	{"google.golang.org/protobuf", "protobuf"},
	{"github.com/hashicorp/go-msgpack", "msgpack (raft log encoding)"},
	{"github.com/hashicorp/raft-boltdb", "bolt log store"},
	{"go.etcd.io/bbolt", "bolt log store"},
	{"github.com/boltdb/bolt", "bolt log store"},
	{"github.com/hashicorp/raft", "hashicorp/raft"},
	{"github.com/cockroachdb/pebble", "pebble"},
	{"github.com/raftps/raftps", "raftps code"},
	{"crypto/", "hashing and crypto"},
	{"hash/", "hashing and crypto"},
	{"encoding/", "encoding (json, binary)"},
	{"net.", "net"},
	{"internal/poll", "net"},
	{"os.", "os"},
}

// Categorize sums flat time by category, largest first, in percent of total.
func Categorize(lines []PprofLine) [][2]string {
	sum := map[string]float64{}
	for _, l := range lines {
		cat := "other"
		for _, c := range profileCategories {
			if strings.HasPrefix(l.Func, c.prefix) {
				cat = c.name
				break
			}
		}
		sum[cat] += l.FlatPct
	}
	var cats []string
	for c := range sum {
		cats = append(cats, c)
	}
	sort.Slice(cats, func(i, j int) bool { return sum[cats[i]] > sum[cats[j]] })
	var res [][2]string
	for _, c := range cats {
		res = append(res, [2]string{c, fmt.Sprintf("%.1f%%", sum[c])})
	}
	return res
}

// putsBehind reports whether any raftps put throughput is below etcd's
// in this run (or the comparison is missing).
func (r *runner) putsBehind() bool {
	seen := false
	for _, row := range r.rep.Rows {
		if row.Section == "metadata store" && strings.HasPrefix(row.Metric, "put") && row.Unit == "ops/s" {
			seen = true
			if rt := row.Ratio(); rt != rt || rt < 1 {
				return true
			}
		}
	}
	return !seen
}

// profileSection takes a CPU profile of raftstore's BenchmarkPut3Node (an
// in-process 3-node cluster on loopback TCP, 1 and 64 clients) and
// summarizes `go tool pprof -top`.
func (r *runner) profileSection(ctx context.Context, tmp string) {
	if !r.putsBehind() {
		r.note("raftps puts are not behind etcd in this run: no profile taken")
		return
	}
	prof, bin := filepath.Join(tmp, "put.cpu.prof"), filepath.Join(tmp, "raftstore.test")
	n := "3000x"
	if r.cfg.Quick {
		n = "1000x"
	}
	r.logf("profiling raftstore BenchmarkPut3Node -benchtime %s", n)
	res, out, err := RunGoBench(ctx, r.cfg.Root, "./raftstore", "^BenchmarkPut3Node$", n, "-cpuprofile", prof, "-o", bin)
	if err != nil {
		r.note(fmt.Sprintf("profile: %v", err))
		r.logf("%s", out)
		return
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=100000", bin, prof)
	cmd.Dir = r.cfg.Root
	top, err := cmd.Output()
	if err != nil {
		r.note(fmt.Sprintf("go tool pprof: %v", err))
		return
	}
	cumCmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount=100000", bin, prof)
	cumCmd.Dir = r.cfg.Root
	cumOut, _ := cumCmd.Output()
	r.rep.Profile = SummarizeProfile(res, string(top), string(cumOut)) + r.fsyncAnalysis(tmp)
}

// rowValue returns the raftps and baseline values of the row named metric.
func (r *runner) rowValue(metric string) (float64, float64) {
	if row, ok := r.row(metric); ok {
		return row.Ours, row.Base
	}
	return NA, NA
}

// fsyncAnalysis puts the 1-client put latencies in units of this disk's
// fdatasync and explains the difference.
func (r *runner) fsyncAnalysis(tmp string) string {
	p50, p99, err := FdatasyncLatency(tmp, 200)
	if err != nil {
		return "\nfdatasync latency: " + err.Error() + "\n"
	}
	fs := ms(p50)
	ours, etcd := r.rowValue(PutWorkload(1).Name + " p50")
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Where a 1-client put's time goes\n\nappend 256 B + fdatasync on this disk (the bench's temp dir): p50 %s ms, p99 %s ms.\n", FormatValue(fs), FormatValue(ms(p99)))
	if ours == ours && etcd == etcd {
		fmt.Fprintf(&b, "put p50 at 1 client: raftps %s ms, etcd %s ms: raftps is %s ms slower per put (%s fdatasyncs' worth).\n",
			FormatValue(ours), FormatValue(etcd), FormatValue(ours-etcd), FormatValue((ours-etcd)/fs))
	}
	b.WriteString(`
The serial path of a raftps put is longer than etcd's. hashicorp/raft's leader
stores an entry (dispatchLogs -> BoltStore.StoreLogs) before it notifies the
replicators; each follower then stores it before acking; and a bolt commit
(raft-boltdb) is a pwrite of the pages, an fdatasync, a pwrite of the meta page
and a second fdatasync. So about four fdatasyncs in a row, plus the hand-offs
between raft's goroutines (runtime.futex, selectgo above). etcd's leader sends
the entry to its followers while it appends it to its own WAL, and a WAL append
is one fdatasync: about two in a row. On this VM an fdatasync is fast in wall
time but costs CPU in the kernel, and the three nodes share 2 cores: the profile
puts most of the CPU in syscalls under StoreLogs (fdatasync and bolt's pwrites),
then the runtime's scheduling. Under concurrency both batch (cmds/entry above);
the put rows show how much of the gap that closes in this run. The log's bbolt
already opens with etcd's backend options (no freelist write per commit, a
hashmap freelist): fewer pages per commit, but the same two fdatasyncs, which
bbolt needs for a commit to be durable (data pages before the meta page).

What would close the gap at low concurrency, largest first: a log store with one
fdatasync per append and no page rewrite (an append-only WAL such as
hashicorp/raft-wal in place of raft-boltdb, which raftps offers as
--raft-log-store wal) halves the fdatasyncs and drops the pwrites on both the
leader's and the follower's step; persisting the leader's
entry in parallel with replication takes one store off the serial path but
needs a change to hashicorp/raft's dispatchLogs (etcd's raft does this).
`)
	b.WriteString(r.logStoreMeasured())
	return b.String()
}

// logStoreMeasured states what the raft-wal rows of this run measured,
// and what the 1-client put row would be with that log store.
func (r *runner) logStoreMeasured() string {
	row, ok := r.row(LogStoreRow(1))
	if !ok || math.IsNaN(row.Ratio()) {
		return ""
	}
	lo, hi := row.Spread()
	s := fmt.Sprintf("\nMeasured in this run (raftstore BenchmarkPutLogStore, 3 nodes in one process): 1-client puts with raft-wal in place of raft-boltdb reach %s (%s to %s) of raft-boltdb's ops/s.",
		FormatRatio(row.Ratio()), FormatRatio(lo), FormatRatio(hi))
	if put, ok := r.row(PutWorkload(1).Name + " throughput"); ok && !math.IsNaN(put.Ratio()) {
		s += fmt.Sprintf(" The 1-client put row is %s of etcd; scaled by that factor it would be about %s.", FormatRatio(put.Ratio()), FormatRatio(put.Ratio()*row.Ratio()))
	}
	if wal, ok := r.row(PutWorkload(1).Name + " throughput " + WALSuffix); ok && !math.IsNaN(wal.Ratio()) {
		lo, hi := wal.Spread()
		s += fmt.Sprintf(" Measured on a raftps cluster started with --raft-log-store wal, it is %s (%s to %s) of etcd.", FormatRatio(wal.Ratio()), FormatRatio(lo), FormatRatio(hi))
	}
	return s + "\n"
}

// row returns the row named metric.
func (r *runner) row(metric string) (Row, bool) {
	for _, row := range r.rep.Rows {
		if row.Metric == metric {
			return row, true
		}
	}
	return Row{}, false
}

// cumOf returns the cumulative percent of the first function whose name
// contains sub.
func cumOf(lines []PprofLine, sub string) (float64, string) {
	for _, l := range lines {
		if strings.Contains(l.Func, sub) {
			return l.CumPct, l.Func
		}
	}
	return NA, ""
}

// SummarizeProfile renders the benchmark's own figures, the flat time by
// category, the cumulative share of the calls that matter for a write
// (fsync, the log store, gRPC, the FSM apply) and the top 20 lines.
func SummarizeProfile(res []GoBench, top, cumTop string) string {
	var b strings.Builder
	b.WriteString("`go test -run '^$' -bench '^BenchmarkPut3Node$' -cpuprofile ./raftstore` (in-process 3-node raftstore cluster on loopback TCP; the whole process: leader, both followers and the clients).\n\n")
	for _, g := range res {
		fmt.Fprintf(&b, "- %s: %s ops/s, p50 %s ms, p99 %s ms, %s commands/entry\n", g.Name,
			FormatValue(g.Metrics["ops/s"]), FormatValue(g.Metrics["p50-ms"]), FormatValue(g.Metrics["p99-ms"]), FormatValue(g.Metrics["cmds/entry"]))
	}
	lines := ParsePprofTop(top)
	header := ""
	for _, l := range strings.Split(top, "\n") {
		if strings.HasPrefix(l, "Duration:") || strings.HasPrefix(l, "Showing nodes") {
			header += l + "\n"
		}
	}
	b.WriteString("\nFlat CPU by where it goes:\n\n")
	for _, c := range Categorize(lines) {
		fmt.Fprintf(&b, "- %s: %s\n", c[0], c[1])
	}
	cl := ParsePprofTop(cumTop)
	b.WriteString("\nCumulative share of the calls on a write's path:\n\n")
	for _, s := range []string{"BoltStore).StoreLogs", "syscall.Fdatasync", "syscall.Fsync", "syscall.pwrite", "bbolt.(*Tx).writeMeta",
		"net.(*netFD).Write", "net.(*netFD).Read", "raft.(*Raft).runLeader", "raft.(*Raft).processLogs",
		"raft.(*NetworkTransport).handleConn", "grpc.(*Server).handleStream", "raftps/fsm.(*FSM).Apply", "runtime.futex", "runtime.gcBgMarkWorker", "runtime.mallocgc"} {
		if v, f := cumOf(cl, s); f != "" {
			fmt.Fprintf(&b, "- %s: %.1f%%\n", f, v)
		}
	}
	b.WriteString("\nTop 20 by flat time (`go tool pprof -top`):\n\n```\n" + header)
	n := 0
	for _, l := range strings.Split(top, "\n") {
		if ParsePprofTop(l) != nil {
			b.WriteString(l + "\n")
			if n++; n == 20 {
				break
			}
		} else if strings.Contains(l, "flat%") {
			b.WriteString(l + "\n")
		}
	}
	b.WriteString("```\n")
	return b.String()
}
