package jepsen_test

import (
	"fmt"
	"time"

	"github.com/raftps/raftps/integration/jepsen"
)

// A stale read: after the put of "2" was acknowledged, a read returns "1".
func ExampleCheckRegisters() {
	ms := int64(time.Millisecond)
	ops := []jepsen.RegisterOp{
		{Process: 0, Kind: jepsen.RegWrite, Key: "k", Value: "1", Status: jepsen.StatusOK, Call: 0, Return: 10 * ms},
		{Process: 1, Kind: jepsen.RegWrite, Key: "k", Value: "2", Status: jepsen.StatusOK, Call: 20 * ms, Return: 30 * ms},
		{Process: 2, Kind: jepsen.RegRead, Key: "k", Result: "1", Status: jepsen.StatusOK, Call: 40 * ms, Return: 50 * ms},
		// A write that timed out is indeterminate; nobody read "3", so it
		// changes nothing either way.
		{Process: 3, Kind: jepsen.RegWrite, Key: "k", Value: "3", Status: jepsen.StatusInfo, Call: 5 * ms, Return: 1005 * ms},
	}
	res, _ := jepsen.CheckRegisters(ops, time.Second)
	fmt.Println(res.Verdict, res.Violations[0])
	// Output:
	// violation history is not linearizable on key(s) k (see linearizability.html for the longest linearizable prefix)
}

// A watcher that skipped an acknowledged put.
func ExampleCheckWatches() {
	acked := []jepsen.AckedPut{{Key: "/a", Value: "1", Revision: 5}, {Key: "/a", Value: "2", Revision: 6}}
	run := jepsen.WatcherRun{ID: 0, StartRevision: 5, EndRevision: 6, Events: []jepsen.WatchEvent{
		{Type: "put", Key: "/a", Value: "2", ModRevision: 6},
	}}
	res := jepsen.CheckWatches([]jepsen.WatcherRun{run}, acked, 6)
	fmt.Println(res.Verdict)
	fmt.Println(res.Violations[0])
	// Output:
	// violation
	// watcher 0: gap: acknowledged put "/a"="1" at revision 5 missing (covered 5..6)
}
