package bench

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// GoBench is one result line of `go test -bench`:
//
//	BenchmarkPushPull/unary/trainers=1-2   3   412345678 ns/op   194.04 MB/s   120.5 MB/cpu-s
//
// Name has the "Benchmark" prefix and the -GOMAXPROCS suffix removed
// ("PushPull/unary/trainers=1"); Metrics maps each unit to its value
// ("ns/op", "MB/s" and every b.ReportMetric unit).
type GoBench struct {
	Name    string             `json:"name"`
	Procs   int                `json:"procs"`
	N       int64              `json:"n"`
	Metrics map[string]float64 `json:"metrics"`
}

var procsSuffix = regexp.MustCompile(`-(\d+)$`)

// ParseGoBench parses the result lines of `go test -bench` output and
// ignores every other line (goos:, PASS, logs, skips).
func ParseGoBench(out string) []GoBench {
	var res []GoBench
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		g := GoBench{Name: strings.TrimPrefix(f[0], "Benchmark"), N: n, Procs: 1, Metrics: map[string]float64{}}
		if m := procsSuffix.FindStringSubmatch(g.Name); m != nil {
			g.Procs, _ = strconv.Atoi(m[1])
			g.Name = strings.TrimSuffix(g.Name, m[0])
		}
		ok := true
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				ok = false
				break
			}
			g.Metrics[f[i+1]] = v
		}
		if ok {
			res = append(res, g)
		}
	}
	return res
}

// Find returns the metric unit of the benchmark called name, NaN if absent.
func Find(bs []GoBench, name, unit string) float64 {
	for _, b := range bs {
		if b.Name == name {
			if v, ok := b.Metrics[unit]; ok {
				return v
			}
		}
	}
	return NA
}

// RunGoBench runs `go test -run ^$ -bench pattern -benchtime benchtime pkg`
// in the module root and returns the parsed results and the raw output.
// A package or benchmark that does not exist yields no results, not an error.
func RunGoBench(ctx context.Context, root, pkg, pattern, benchtime string, extra ...string) ([]GoBench, string, error) {
	args := append([]string{"test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", "1"}, extra...)
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	res := ParseGoBench(string(out))
	if err != nil && len(res) == 0 {
		return nil, string(out), fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return res, string(out), nil
}
