// Package groupcommit is the rule raftps's proposal batcher (raftstore),
// which packs concurrent commands into one Raft log entry, follows before
// it closes a batch. (A follower's forward queue, raftstore/service, does
// not wait: its wait stacked on the leader's and was measured slower.)
//
// A batcher that sends the next batch as soon as the previous one is
// answered splits concurrent proposers into groups that take turns: the
// proposals queued while batch A was in flight form batch B the moment A
// is answered, before A's proposers are back, so each batch (and each
// fsync behind it) carries only part of them. A Tracker remembers how many
// proposers the last batch answered and how many proposals arrived since;
// Missing says how many of those proposers are not back yet and how long
// to wait for them, and Fill waits. A single client in a loop is always
// back before its next batch forms, so it never waits.
//
// This is the delay-until-count rule of MySQL's group commit
// (binlog_group_commit_sync_delay with binlog_group_commit_sync_no_delay_count),
// with the delay bounded by the last batch's own round trip so that a fast
// disk keeps it short.
//
//	var t groupcommit.Tracker
//	// on each arrival:       t.Arrived()
//	// when a batch resolves: t.Resolved(len(batch), time.Since(sent))
//	// before sending:        batch = groupcommit.Fill(t, queue, batch, max, linger, stop)
package groupcommit
