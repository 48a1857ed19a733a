package dashboard_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/nodetest"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/trainer/trainertest"
)

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// promqlNames returns the metric names a PromQL expression (or a Grafana
// label_values(...) query) selects: identifiers that are not functions,
// keywords, label names (in {...}, by/without/on/ignoring/group_x
// lists), durations ([...]) or strings.
func promqlNames(expr string) []string {
	strip := []*regexp.Regexp{
		regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`), // strings
		regexp.MustCompile(`\{[^}]*\}`),                           // label matchers
		regexp.MustCompile(`\[[^\]]*\]`),                          // ranges
		regexp.MustCompile(`(?i)\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`),
		regexp.MustCompile(`\$\{?\w+\}?`), // Grafana variables
	}
	for _, re := range strip {
		expr = re.ReplaceAllString(expr, " ")
	}
	// label_values(metric, label): the label is not a metric.
	expr = regexp.MustCompile(`label_values\(\s*([A-Za-z_:][\w:]*)\s*,\s*\w+\s*\)`).ReplaceAllString(expr, "$1")
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
	var out []string
	ident := regexp.MustCompile(`[A-Za-z_:][\w:]*`)
	for _, loc := range ident.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		rest := strings.TrimLeft(expr[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || keywords[strings.ToLower(name)] {
			continue // a function or aggregation
		}
		if loc[0] > 0 && (expr[loc[0]-1] >= '0' && expr[loc[0]-1] <= '9' || expr[loc[0]-1] == '.') {
			continue // the exponent or unit of a number (1e3)
		}
		out = append(out, name)
	}
	return out
}

func TestPromQLNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (le, node) (rate(raftps_raft_apply_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`: {"raftps_raft_apply_seconds_bucket"},
		`max by (node) (raftps_raft_commit_index{a="b"} - raftps_raft_applied_index)`:                                                   {"raftps_raft_commit_index", "raftps_raft_applied_index"},
		`label_values(raftps_job_tasks, job_name)`:                                                                                      {"raftps_job_tasks"},
		`sum(rate(x_total[5m])) / 1e3 > bool 0`:                                                                                         {"x_total"},
	} {
		if got := promqlNames(expr); !slices.Equal(got, want) {
			t.Errorf("promqlNames(%s) = %v, want %v", expr, got, want)
		}
	}
}

// grafanaQueries returns every query of the dashboard JSON: panel (and
// row) targets and templating queries.
func grafanaQueries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	type panel struct {
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var out []string
	var walk func(raw []json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatal(err)
			}
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Fatalf("templating query %s", v.Query)
			}
			q.Query = s
		}
		out = append(out, q.Query)
	}
	return out
}

// exportedNames scrapes a node's /metrics and returns its series names
// (a histogram x as x_bucket, x_sum, x_count).
func exportedNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	out := map[string]bool{}
	for name, f := range fams {
		if len(f.Metric) == 0 {
			continue
		}
		out[name] = true
		switch f.GetType().String() {
		case "HISTOGRAM", "SUMMARY":
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		}
	}
	return out
}

// TestGrafanaQueriesNameExportedMetrics runs a small job on an in-process
// node with every role, then checks that every query of
// deploy/grafana/raftps.json names only metrics the node's /metrics
// exports (with at least one series).
func TestGrafanaQueriesNameExportedMetrics(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	queries := grafanaQueries(t, filepath.Join(root, "deploy", "grafana", "raftps.json"))
	if len(queries) < 20 {
		t.Fatalf("%d queries in the Grafana dashboard", len(queries))
	}
	// The job's 1000 records in Fashion-MNIST's layout: the trainer loads
	// its whole dataset before it starts, and all 60000 records of
	// Fashion-MNIST took the job past 3 minutes under the race detector
	// beside CPU hogs.
	ds := t.TempDir()
	if err := trainertest.WriteSynthetic(ds, 1000, 100, 1); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Open(t, "n1", []string{gossip.RoleServer, gossip.RolePServer, gossip.RoleTrainer},
		func(c *node.Config) { c.DatasetRoots = []string{ds} })
	cl, err := client.New([]string{n.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	spec := smallSpec(t, "grafana", 1000, 1)
	spec.Dataset.Path = ds
	submit(t, cl, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		r, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: "grafana"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.State == pb.JobState_JOB_SUCCEEDED {
			break
		}
		if r.Status.State != pb.JobState_JOB_RUNNING && r.Status.State != pb.JobState_JOB_PENDING {
			t.Fatalf("job %v: %s", r.Status.State, r.Status.Message)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job not done: %v (%d/%d tasks)", ctx.Err(), r.Status.Done, r.Status.TotalTasks)
		case <-time.After(200 * time.Millisecond):
		}
	}
	have := exportedNames(t, "http://"+n.HTTPAddr()+"/metrics")
	var missing, named []string
	for _, q := range queries {
		names := promqlNames(q)
		if len(names) == 0 {
			t.Errorf("query names no metric: %s", q)
		}
		for _, name := range names {
			named = append(named, name)
			if !have[name] {
				missing = append(missing, name+" in "+q)
			}
		}
	}
	for _, m := range missing {
		t.Errorf("the Grafana dashboard queries a metric the node does not export: %s", m)
	}
	sort.Strings(named)
	t.Logf("%d queries name %d metrics, all exported: %v", len(queries), len(slices.Compact(named)), slices.Compact(named))
	// The check can fail: a name the node does not export is reported.
	if have["raftps_no_such_metric"] {
		t.Fatal("the scrape reports a metric nobody exports")
	}
}
