// Package security is raftps' transport security and authorisation: the
// TLS material of a node or client, the roles certificates carry, the
// authorisation of each gRPC call, the CA that issues certificates, gossip
// keyring files, and the confinement of client-named paths.
//
//	m, err := security.Load(security.Files{CA: "ca.pem", Cert: "n1.pem", Key: "n1-key.pem"}, log)
//	srv := grpc.NewServer(grpc.Creds(m.ServerCredentials()),
//		grpc.ChainUnaryInterceptor((&security.Authorizer{Log: log}).UnaryInterceptor()))
//	cc, err := grpc.NewClient(addr, m.DialOptions()...)
//
// # TLS
//
// TLS 1.3 only, mutual: every server asks for a client certificate signed
// by the cluster CA, every client checks the server's against the CA, its
// host name (IP or DNS SAN) and the node role. Material reloads from disk
// when a file's size or mtime changes (checked at most once per
// PollInterval, at handshakes), so certificates and the CA rotate without
// a restart; a half-written file keeps the loaded material. Load refuses
// a certificate that is expired (ErrExpired) or not signed by the CA
// (ErrNotSigned). Go's crypto/tls and crypto/x509 do all cryptography.
//
// # Roles
//
// A certificate's role is its SAN URI raftps://role/<role> (RoleOf),
// spelled exactly so (the raw SAN is read; any other spelling of a
// raftps URI, or two roles, gives no role): node, admin, trainer, reader;
// a trainer's jobs are raftps://job/<job> URIs, each a job name or a
// path.Match pattern ("exp-*" serves exp-1, exp-2...: Identity.HasJob). Authorizer enforces the
// RPC table (rpctable.go, RPCTable): one row per method of every gRPC
// server of a node (a test walks the node's servers against it) with the
// roles that may call it and a trainer's limits. node: everything, and
// alone the internal APIs; admin: every user method; trainer: the jobs its
// certificate names only (their keys, status, events, task API, pull and
// push), as the trainer its certificate's name names, Put/Delete of its
// registration key /jobs/<job>/trainers/<name> and single keys under
// its jobs' /torch/store/<job>/ (raftps.torch.Store), leases of at most
// TrainerMaxLeaseTTL and TrainerMaxLeases; reader: an operator's
// read-only view of every job. A refusal is PermissionDenied naming the
// method, the identity and why, and a Warn log line. Streams are checked
// per received message; a trainer's ListJobs answer is trimmed to its
// jobs.
//
// # Leases
//
// A lease belongs to the identity that granted it (Identity.Owner,
// recorded in the replicated lease state). CheckLease, called by the Lease
// services (raftps's and etcd's), lets node and admin act on any lease, a
// reader read any, and a trainer keep alive, revoke or read only its own;
// a lease without an owner (a node's, or one granted before owners were
// recorded) is node's and admin's.
//
// # Connections after a CA rotation
//
// A certificate is verified at the TLS handshake. A connection and its
// streams opened before the CA rotated keep their verified identity
// until they end; after a rotation, Material closes every server-side
// connection whose peer certificate no longer verifies against the new
// CA (see Material.Reload).
//
// Servers bound what an unauthenticated peer can hold: ServerCredentials
// refuses more than HandshakesPerSource TLS handshakes in flight from one
// IP address (SourceLimiter), and the node bounds each handshake with
// HandshakeTimeout.
//
// # Certificates
//
// NewCA and CA.Issue make ECDSA P-256 certificates (`raftps tls`); Dev
// makes a loopback CA, node and admin certificates for the demo and
// tests. WriteFile writes 0600 files atomically and never overwrites
// unless told.
//
// # Gossip keyring, paths
//
// LoadKeyringFile/SaveKeyringFile read and write Consul's keyring format
// (a JSON array of base64 keys, the primary first); Fingerprint names a
// key without revealing it. ConfinePath resolves a client-named path under
// configured roots without following a link out, with one refusal
// (ErrOutsideRoots) that does not tell what exists.
package security
