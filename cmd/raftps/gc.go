package main

import (
	"log/slog"
	"os"
	"sync"

	"github.com/bytedance/gopkg/util/gctuner"
	"github.com/dustin/go-humanize"
)

// GC tuning of a node process. A node's live heap is small next to the
// machine (the FSM, the Raft log cache, gRPC buffers: tens of MiB) while
// it allocates per request, so with GOGC=100 the collector runs every
// few MiB of garbage, and a loaded leader spends a large share of its CPU
// in GC (mark workers, assists, sweeping; the figure is in DESIGN.md,
// "Measurements"). The tuner
// (bytedance/gopkg gctuner, after Uber's "How We Saved 70K Cores", 2021)
// sets GOGC after every cycle so that the next one starts when the heap
// reaches the threshold:
//
//	GOGC = (threshold − in use) / in use × 100, within [gcMinPercent, gcMaxPercent]
//
// A heap at or above the threshold (a pserver holding large slots) keeps
// GOGC=100, the Go default, so tuning never makes a big heap bigger than
// the default would.
const (
	gcMinPercent = 100
	gcMaxPercent = 500
	// gcDefaultThreshold is --gc-heap-threshold's default, lowered to an
	// eighth of the machine's memory on small machines.
	gcDefaultThreshold = 512 << 20
)

var gcBoundsOnce sync.Once

// defaultGCThreshold is gcDefaultThreshold, at most memTotal/8 (memTotal
// in bytes, 0 if unknown).
func defaultGCThreshold(memTotal uint64) uint64 {
	if memTotal > 0 && memTotal/8 < gcDefaultThreshold {
		return memTotal / 8
	}
	return gcDefaultThreshold
}

// tuneGC starts the tuner with threshold bytes (0: off). An explicit
// GOGC in the environment is the operator's choice and turns it off.
func tuneGC(threshold uint64, log *slog.Logger) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Info("GOGC is set: the GC tuner is off", "GOGC", v)
		return
	}
	if threshold == 0 {
		return
	}
	// The bounds are process-wide, and the tuner reads them after every
	// GC without synchronisation: set them once, before the first tuner
	// exists (a second node command in one process, as in tests, only
	// moves the threshold, which the tuner reads atomically).
	gcBoundsOnce.Do(func() {
		gctuner.SetMinGCPercent(gcMinPercent)
		gctuner.SetMaxGCPercent(gcMaxPercent)
	})
	gctuner.Tuning(threshold)
	log.Debug("GC tuner on", "heap_threshold", humanize.IBytes(threshold), "gogc_min", gcMinPercent, "gogc_max", gcMaxPercent)
}
