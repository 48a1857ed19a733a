package raftstore

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// gatedTransport is a raft.NetworkTransport whose heartbeat handler Close
// can wait for (hashicorp/raft#717). NetworkTransport runs heartbeats on
// its connection goroutines (Raft.processHeartbeat, its fast path), not on
// the goroutines that Raft.Shutdown waits for. So a heartbeat that passed
// raft's shutdown check can reach the stable store after Close closed it,
// and raft panics ("failed to save current term: database not open"),
// killing the process on its way out. Every heartbeat runs under the
// gate's read lock; after Shutdown, Close takes the write lock, so the
// heartbeats in flight finish against the open store and later ones are
// refused before they reach raft.
type gatedTransport struct {
	*raft.NetworkTransport // every other method, and the optional interfaces (WithClose, WithPreVote)

	mu     sync.RWMutex
	closed bool
	hook   atomic.Pointer[func()] // tests: runs in each heartbeat, under the read lock
}

// SetHeartbeatHandler installs cb behind the gate.
func (t *gatedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.closed {
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
		if h := t.hook.Load(); h != nil {
			(*h)()
		}
		cb(rpc)
	})
}

// closeGate waits for the heartbeats in flight; later ones are refused.
func (t *gatedTransport) closeGate() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}
