// Package gossip tells every raftps node which nodes exist, what they are
// (ID, roles, gRPC/Raft/HTTP addresses) and whether they are alive, using
// hashicorp/memberlist (SWIM failure detection with Lifeguard's
// refinements, gossip dissemination, TCP push/pull anti-entropy).
//
// It decides nothing. It reports joins, metadata updates, graceful leaves
// and failures; the master (on the Raft leader) decides what they mean, for
// example by writing /nodes/<id> and requeueing a dead trainer's tasks.
//
// # Usage
//
//	cfg := gossip.DefaultConfig()
//	cfg.Meta = gossip.Meta{ID: "n1", Roles: []string{gossip.RoleServer, gossip.RoleTrainer},
//		GRPCAddr: "10.0.0.1:7000", RaftAddr: "10.0.0.1:7001", HTTPAddr: "10.0.0.1:7003"}
//	cfg.BindAddr = "0.0.0.0:7002"
//	cfg.AdvertiseAddr = "10.0.0.1"
//	cfg.Join = []string{"10.0.0.2:7002", "10.0.0.3:7002"} // may include ourselves
//	g, err := gossip.New(cfg)
//	if err != nil { ... }
//	if err := g.Open(ctx); err != nil { ... } // listening; joining in the background
//	defer g.Close()                            // leave gracefully, then shut down
//
//	events, cancel := g.Subscribe() // subscribe first,
//	defer cancel()
//	for _, m := range g.Members() { ... } // then read the current members,
//	for ev := range events { ... }        // then follow the changes.
//
// # Roles
//
// A member's roles are the constants RoleServer (a Raft voter), RolePServer
// and RoleTrainer; Meta.HasRole (and HasRole for a bare list) is the one
// predicate every package uses to ask what a member is.
//
// # Members and events
//
// Members lists every member this node knows of, itself included, with its
// Status: alive, dead (declared failed: crash, kill, partition) or left
// (called Leave or Close). Dead and left members stay listed for
// Config.DeadRetention. Subscribe delivers the changes as Events: EventJoin,
// EventUpdate (metadata changed), EventLeave, EventFail, and EventConflict
// (a second process uses an ID that is alive elsewhere; memberlist ignores
// it; reported at most every 10 s per claimant). Every subscriber gets every event, in memberlist's order. Delivery
// never blocks memberlist: a subscriber more than 1024 events behind loses
// its oldest events (with a logged warning), so events are hints and
// Members is the truth.
//
// memberlist does not tell its delegates when it suspects a member, so
// StatusSuspect is defined but not reported; suspicion shows up as EventFail
// once it expires, or as nothing if the member refutes it.
//
// # Failure detection
//
// DefaultConfig is tuned so that a member that stops answering is declared
// dead by all others within 3 s on a LAN cluster of a few members: probe
// every 250 ms, ack within 200 ms, then a suspicion of 3 probe intervals
// (750 ms) when another member confirms it, up to 1.5 s otherwise, so that
// one slow prober cannot evict a healthy member on its own. Measured on
// 127.0.0.1 with 3 members as the time until both survivors report
// EventFail, on a shared 2-core machine: TestSIGKILLDetection kills a
// member running in a child process with SIGKILL (5 trials);
// TestFailureDetection stops an in-process member without leaving, which
// is what SIGKILL does to memberlist (7 trials each):
//
//	ProbeInterval / ProbeTimeout / SuspicionMult   median   max
//	250 ms / 200 ms / 3 (default), SIGKILL, -race  1.41 s   1.55 s
//	250 ms / 200 ms / 3 (default), go test -race   1.15 s   1.44 s
//	250 ms / 200 ms / 3 (default)                  1.13 s   1.72 s
//	250 ms / 200 ms / 2                            0.89 s   1.24 s
//	300 ms / 200 ms / 3                            1.30 s   1.50 s
//	500 ms / 250 ms / 2                            1.71 s   2.92 s
//
// Detection takes longer when the probers themselves are unhealthy:
// Lifeguard then stretches their probe intervals up to 8 times.
//
// # Joining
//
// Open binds the listeners and starts a one-member cluster, then joins
// Config.Join in the background, retrying with exponential backoff (100 ms
// to 2 s) for Config.JoinRetryMax; JoinedCh and Joined wait for it. The
// node's own address is skipped, so one --join list serves every node, and
// nodes may start in any order. If the cluster already has a live member
// with our ID at another address, Join fails with ErrConflict and the
// cluster reports EventConflict: IDs must be unique. A node restarted on a
// new address may reuse its ID once it has been dead for
// Config.DeadNodeReclaimTime; on the same address at once.
//
// memberlist never contacts a dead member again, so on its own the two
// sides of a partition that outlasts the suspicion would stay apart after
// it heals. Like Serf, this package runs a reconnect loop: every
// Config.ReconnectInterval (2 s) it tries to join one random dead member,
// and, while it sees no other member alive, the Join addresses again.
// Config.Label keeps clusters that share a network (or, in tests, reuse
// each other's ports) from merging.
//
// # Encryption
//
// Config.SecretKey (16, 24 or 32 bytes, the same on every member) encrypts
// and authenticates all gossip with AES-GCM. A member with another key, or
// none, cannot join: its Join keeps failing until its context ends.
//
// # Incarnation
//
// Member.Incarnation is stamped into the metadata by the member itself: the
// Unix time at which its Gossip was created, plus one per UpdateMeta. It
// orders the metadata versions of one ID and tells a restarted process
// from an updated one. It is not memberlist's SWIM incarnation.
//
// # Concurrency
//
// All methods of Gossip are safe for concurrent use. The lifecycle is New,
// Open, Close (Close is safe twice and before Open). The caller must drain
// its subscriptions or cancel them, and must Close the Gossip.
package gossip
