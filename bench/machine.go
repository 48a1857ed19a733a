package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a run happened; it heads the results file.
type Machine struct {
	Time     string `json:"time_utc"`
	Host     string `json:"host"`
	NProc    int    `json:"nproc"`
	MemTotal string `json:"mem_total"`
	CPU      string `json:"cpu_model"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Etcd     string `json:"etcd"`
	Load     string `json:"loadavg_at_start"`
}

// DescribeMachine reads /proc and asks `go version` and `etcd --version`.
func DescribeMachine(ctx context.Context, etcdBin string) Machine {
	m := Machine{Time: time.Now().UTC().Format(time.RFC3339), NProc: runtime.NumCPU()}
	m.Host, _ = os.Hostname()
	m.MemTotal = procField("/proc/meminfo", "MemTotal")
	m.CPU = procField("/proc/cpuinfo", "model name")
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	m.Go = firstLine(cmdOutput(ctx, "go", "version"))
	m.Etcd = "n/a"
	if etcdBin != "" {
		m.Etcd = firstLine(cmdOutput(ctx, etcdBin, "--version"))
	}
	return m
}

// Lines returns the description as "key: value" lines.
func (m Machine) Lines() []string {
	return []string{
		"time (UTC): " + m.Time,
		"host: " + m.Host,
		fmt.Sprintf("nproc: %d", m.NProc),
		"memory: " + m.MemTotal,
		"cpu: " + m.CPU,
		"kernel: " + m.Kernel,
		"go: " + m.Go,
		"etcd: " + m.Etcd,
		"load average at start: " + m.Load,
	}
}

func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "n/a"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "n/a"
}

func cmdOutput(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "n/a"
	}
	return string(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
