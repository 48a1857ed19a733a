package pserver

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// The update of a step runs on every core: trainers wait for it (sync
// SGD: push, update, reply, compute), and one core takes milliseconds
// for millions of parameters (pserver/DESIGN.md, "Measured"). runChunks splits such
// work into chunks that the calling goroutine and idle helper goroutines
// claim one at a time (dynamic scheduling, as OpenMP's
// schedule(dynamic)): a helper that starts late (a parked core is slow
// to wake on a VM) or not at all (the helpers are busy with other
// slots' updates) only takes fewer chunks, and the caller never waits for
// more than the chunks already claimed.

// chunkJob is one runChunks call.
type chunkJob struct {
	n    int64
	fn   func(i int)
	next atomic.Int64  // next chunk to claim
	done atomic.Int64  // chunks finished
	fin  chan struct{} // closed by whoever finishes the last chunk
}

// work claims and runs chunks until none is left.
func (j *chunkJob) work() {
	for {
		i := j.next.Add(1) - 1
		if i >= j.n {
			return
		}
		j.fn(int(i))
		if j.done.Add(1) == j.n {
			close(j.fin)
		}
	}
}

// serialChunks makes runChunks run every chunk on the caller: the
// one-core baseline of BenchmarkSyncPushCores.
var serialChunks atomic.Bool

var (
	helpersOnce sync.Once
	helpers     chan *chunkJob // unbuffered: a send succeeds only to an idle helper
	numHelpers  int
)

// startHelpers starts GOMAXPROCS-1 helper goroutines (once per process).
func startHelpers() {
	numHelpers = runtime.GOMAXPROCS(0) - 1
	helpers = make(chan *chunkJob)
	for range numHelpers {
		go func() {
			for j := range helpers {
				j.work()
			}
		}()
	}
}

// runChunks runs fn(0) … fn(n-1), each once, on the calling goroutine and
// on helpers that are idle now, and returns when all have returned. The
// calls may run concurrently: each must touch only its own part of shared
// data. Their writes happen before runChunks returns.
func runChunks(n int, fn func(i int)) {
	if n <= 1 || serialChunks.Load() {
		for i := range n {
			fn(i)
		}
		return
	}
	helpersOnce.Do(startHelpers)
	j := &chunkJob{n: int64(n), fn: fn, fin: make(chan struct{})}
	for range min(numHelpers, n-1) {
		select {
		case helpers <- j:
		default: // every helper is busy: the caller does more
		}
	}
	j.work()
	<-j.fin
}
