// Package dashboard is the web dashboard every raftps node serves at its
// HTTP address (`/`): the cluster, the jobs, and one job's loss and
// accuracy plots with the fault events on the same time axis, refreshed
// live (TensorBoard's scalars, Consul's UI and the etcd and Grafana
// dashboards are what it is compared with).
//
//	d, err := dashboard.New(dashboard.Config{Endpoints: []string{n.GRPCAddr()}, Verify: verify}) // verify: a VerifyFunc (node adapts checkpoint.Manager.Verify)
//	mux.Handle("/", d) // and d.Close() when the node closes
//
// # Sources
//
// Everything is read through the node's own gRPC client API (raftstore/
// client), as the CLI reads it: Master.ListJobs / GetJob / WatchJob /
// CancelJob / DeleteJob, Cluster.Members / Status, KV.Range over schema's
// slot keys and Lease.LeaseTimeToLive. Any node answers: those RPCs follow
// the leader on the server side (linearizable reads, forwarded writes).
// The Raft state of every member is asked of that member (Cluster.Status
// on its gRPC address, failing fast, 300 ms bound). A replicated slot's
// replication lag (raftps_pserver_replication_lag_updates, issue 34) is
// read from its primary node's /metrics (HTTP address from Members; over
// mutual TLS with the node's certificate when it serves --http-tls,
// Config.MetricsTLS; 300 ms bound, unknown if it does not answer). Node deaths and leader changes are
// not job events: a cluster watcher polls Members and Status every 250 ms
// and keeps the last 512 changes in memory (lost when the node restarts).
//
// # HTTP API (JSON; times are Unix milliseconds)
//
//	GET  /api/identity                         the client certificate's name and role, and which
//	                                           writes (cancel, delete, verify) it may do
//	GET  /api/cluster                          members, Raft state per member, slot placement with leases
//	GET  /api/cluster/events                   server-sent events: "cluster" (a node or leader change)
//	GET  /api/jobs                             every job
//	GET  /api/jobs/{job}                       one job with its checkpoints, restores and replicated
//	                                           slots (primary, in-sync backups, epoch, lag)
//	GET  /api/jobs/{job}/events                server-sent events: "job" (a JobEvent), "status"
//	                                           (the job, at most once a second when it changed),
//	                                           "cluster" (a node or leader change)
//	POST /api/jobs/{job}/cancel                CancelJob
//	POST /api/jobs/{job}/delete                DeleteJob (the job must not be running)
//	POST /api/jobs/{job}/checkpoints/{version}/verify   re-hash every blob on every replica
//
// The event stream starts at the job's first retained event (or after
// Last-Event-ID when the browser reconnects) and follows WatchJob,
// re-opening it after a leader change. Writes (POST) need the header
// X-Raftps-Request (a cross-site form cannot send it). gRPC errors map to HTTP statuses
// (NotFound 404, FailedPrecondition 409, InvalidArgument 400, Unavailable
// 503, DeadlineExceeded 504) with the server's message.
//
// # HTTPS and roles
//
// A node started with --http-tls serves its whole HTTP port (this
// dashboard, its API and streams, /metrics, /healthz, /readyz) over mutual
// TLS 1.3 with its own certificate (security.Material.ServerConfig, the
// gRPC ports' configuration, reloaded when the files change): every
// client must present a certificate of the cluster CA, as etcd's client
// URLs with --client-cert-auth and Consul's HTTPS port with
// verify_incoming require; a Prometheus scraper uses a reader
// certificate (tls_config cert_file/key_file). Without --http-tls the port
// stays plaintext (kubelet probes, plain scrapers), and on a TLS node the
// dashboard is then read-only (Config.ReadOnly).
//
// The dashboard calls the API with the node's certificate, so it
// authorises each request itself by the role of the request's verified
// client certificate, with the gRPC API's rule (security.Roles of the
// method the request calls): every role reads and verifies checkpoints
// (Master/ListJobs, CheckpointStore/VerifyBlob); cancel and delete need
// admin (Master/CancelJob, DeleteJob). A refusal is 403 with ErrForbidden's
// message naming the role, the certificate and the roles that may, and a
// Warn log line; an allowed write is logged with the certificate's name.
// The page asks /api/identity once and shows the cancel, delete and
// verify buttons only to a role that may. A request without a verified
// certificate (plaintext) may read, and write unless Config.ReadOnly.
//
// # Assets
//
// The page (ui/index.html, app.js, style.css) and the charting library
// (uPlot, vendored under ui/vendor/uplot with its licence and pinned
// version; scripts/vendor-web.sh re-vendors it) are embedded with go:embed:
// nothing is fetched at run time and no served file names an external URL
// (TestAssetsNameNoExternalURL), so an air-gapped cluster sees the same
// page. The page is a single document with three views (#/cluster,
// #/jobs, #/jobs/<job>). The job view's charts (loss, test accuracy with
// a fitted axis, examples/s, the task queue, examples/s per trainer, the
// fault timeline) share one time axis on one clock, the wall clock: job
// events carry their proposer's wall time (package fsm/jobq), node and
// leader changes this node's. While the cursor is off a chart its legend
// shows the newest point. The job view's replicas table shows each
// replicated slot's primary, in-sync backups, epoch and lag, the copies
// per slot with the master's reason when it chose them, and the slot's
// latest PSERVER_PROMOTED event with how long the promotion took.
package dashboard
