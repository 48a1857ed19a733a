package bench

import (
	"context"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogLogSlope: the fitted slope of y = c x^k is k for linear,
// quadratic, flat and inverse curves, and NaN without two usable points.
func TestLogLogSlope(t *testing.T) {
	for _, k := range []float64{1, 2, 0, -1, 0.5} {
		var pts []Point
		for _, x := range []float64{1, 4, 16, 64} {
			pts = append(pts, Point{x, 3 * math.Pow(x, k)})
		}
		if got := LogLogSlope(pts); math.Abs(got-k) > 1e-9 {
			t.Errorf("slope of 3x^%g = %g", k, got)
		}
	}
	if got := LogLogSlope([]Point{{1, 1}, {0, 5}, {2, -1}}); !math.IsNaN(got) {
		t.Errorf("slope of one usable point = %g, want NaN", got)
	}
}

// TestWriteSVG: the plot is well-formed XML with one circle per point and
// the fitted line, and a curve without a positive point is an error.
func TestWriteSVG(t *testing.T) {
	c := Curve{Name: "c", Title: "a < b & c", XLabel: "trainers", YLabel: "ms", Points: []Point{{1, 2}, {8, 20}, {64, 150}}}
	c.fit()
	var b strings.Builder
	if err := WriteSVG(&b, c); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(b.String()))
	circles, lines := 0, 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("svg is not XML: %v\n%s", err, b.String())
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "circle":
				circles++
			case "line":
				lines++
			}
		}
	}
	if circles != 3 || lines == 0 {
		t.Errorf("svg has %d circles (want 3) and %d lines", circles, lines)
	}
	if err := WriteSVG(&b, Curve{Name: "empty", Points: []Point{{0, 1}}}); err == nil {
		t.Error("a curve without a positive point plotted without error")
	}
}

// TestScalingQuick runs the scaling section in quick mode and checks
// every curve has its points, a finite slope and a saved plot linked from
// the results file, and what the design promises of the replicated
// state: concurrent task calls share Raft entries, and a task's log bytes
// grow neither with the number of trainers nor with the job's steps.
func TestScalingQuick(t *testing.T) {
	r := &runner{cfg: Config{Quick: true}, rep: &Report{}, raw: map[string]any{}}
	r.scalingSection(context.Background(), t.TempDir())
	if len(r.rep.Notes) > 0 {
		t.Fatalf("notes: %v", r.rep.Notes)
	}
	byName := map[string]Curve{}
	for _, c := range r.rep.Curves {
		byName[c.Name] = c
		t.Logf("%-36s slope %5.2f  %v", c.Name, c.Slope, c.Points)
		if len(c.Points) < 2 || math.IsNaN(c.Slope) {
			t.Errorf("curve %s: %d points, slope %g", c.Name, len(c.Points), c.Slope)
		}
	}
	for _, name := range []string{"sync-step-vs-trainers", "pserver-cpu-vs-slots", "master-p99-vs-trainers", "raft-bytes-per-call-vs-trainers",
		"mem-per-conn", "raft-bytes-vs-jobs", "checkpoint-time-vs-params"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("no curve %s", name)
		}
	}
	if c := byName["raft-entries-per-call-vs-trainers"]; len(c.Points) < 2 || c.Points[len(c.Points)-1].Y >= 1 {
		t.Errorf("Raft entries per task call with the most trainers: %v, want < 1 (concurrent task calls share entries)", c.Points)
	}
	for _, name := range []string{"raft-bytes-per-call-vs-trainers", "raft-bytes-per-call-vs-tasks-done"} {
		if c := byName[name]; c.Slope > 0.3 {
			t.Errorf("%s: Raft bytes per task call grow: slope %.2f over %v", name, c.Slope, c.Points)
		}
	}
	dir := t.TempDir()
	paths, err := r.rep.Save(dir)
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.rep.Curves {
		if c.Plot == "" || !strings.Contains(string(md), "("+c.Plot+")") {
			t.Errorf("curve %s: plot %q not linked from %s", c.Name, c.Plot, paths[0])
		}
		if _, err := os.Stat(filepath.Join(dir, c.Plot)); err != nil {
			t.Errorf("curve %s: %v", c.Name, err)
		}
	}
}
