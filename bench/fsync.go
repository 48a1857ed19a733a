package bench

import (
	"os"
	"slices"
	"syscall"
	"time"
)

// FdatasyncLatency appends a 256-byte record and fdatasyncs it n times in
// dir and returns the p50 and p99 of one append+fdatasync: the floor of a
// durable write on this disk, which both etcd's WAL and bolt pay per sync.
func FdatasyncLatency(dir string, n int) (p50, p99 time.Duration, err error) {
	f, err := os.CreateTemp(dir, "fsync-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	ds := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if _, err := f.Write(value256); err != nil {
			return 0, 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	return Percentile(ds, 0.5), Percentile(ds, 0.99), nil
}
