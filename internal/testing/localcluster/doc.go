// Package localcluster starts `raftps node` processes on loopback: the
// demo, the end-to-end tests and the benchmarks all build their local
// clusters with it.
//
//	nodes, err := localcluster.New(bin, dir, 3)    // n1..n3, --join each other, --bootstrap-expect 3
//	for _, n := range nodes { n.Start() }
//	opts, err := localcluster.DialOptions(nodes[0].Admin) // the admin's mutual TLS
//	cl, err := client.New([]string{nodes[0].GRPC}, opts...)
//	n4, err := localcluster.Add(bin, dir, nodes)    // joins the others; no --bootstrap-expect
//	nodes[0].Kill()                                 // SIGKILL and wait
//	nodes[0].Start()                                // the same command line and data dir
//	localcluster.Save(dir, nodes)                   // <dir>/cluster.json ...
//	nodes, err = localcluster.Load(bin, dir)        // ... the same cluster again, after the process that made it exits
//
// Secure by default: New makes a PKI in <dir>/pki (a CA, one node
// certificate per node, the admin's client certificate and a gossip key)
// and every node runs mutual TLS with gossip encrypted from its own copy
// of the keyring (<dir>/<id>.keyring). A cluster is plaintext only when
// its extra flags say --insecure (tests about plaintext, the TLS-vs-
// plaintext benchmark); then Node.Admin is zero and DialOptions dials in
// the clear. Test clients take their credentials from DialOptions,
// ClientTLS (etcd's client) or CLIFlags (the raftps CLI).
//
// Ports (FreePorts) are chosen at random below the kernel's ephemeral
// range, each bound once to check it is free and reserved for ten minutes
// across the processes of the machine ($TMPDIR/raftps-ports): between
// that check and the node's bind no other process's outgoing connection
// and no other test's cluster takes it.
//
// Each node logs to <dir>/<id>.log (appended across restarts). Children
// are in their own process group and die with the parent (Pdeathsig).
// A Node's methods are safe for concurrent use.
package localcluster
