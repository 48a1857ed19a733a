// Package gossip tells every raftps node which nodes exist, what they are
// (ID, roles, gRPC/Raft/HTTP addresses) and whether they are alive, using
// hashicorp/memberlist (SWIM failure detection with Lifeguard's
// refinements, gossip dissemination, TCP push/pull anti-entropy).
//
// It decides nothing. It reports joins, metadata updates, graceful leaves,
// suspicions (EventSuspect: memberlist suspects a member, read by polling
// its node state, suspect.go; the member stays alive in Members) and
// failures; the master (on the Raft leader) decides what they mean, for
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
// # Concurrency
//
// All methods of Gossip are safe for concurrent use. The lifecycle is New,
// Open, Close (Close is safe twice and before Open). The caller must drain
// its subscriptions or cancel them, and must Close the Gossip.
//
// The design notes of this package ("Roles", "Members and events", "Failure
// detection", "Joining", "Encryption", "Incarnation") are in DESIGN.md in
// this directory.
package gossip
