// Package dashboard is the web dashboard every raftps node serves at its
// HTTP address (`/`): the cluster, the jobs, and one job's loss and
// accuracy plots with the fault events on the same time axis, refreshed
// live (TensorBoard's scalars, Consul's UI and the etcd and Grafana
// dashboards are what it is compared with).
//
//	d, err := dashboard.New(dashboard.Config{Endpoints: []string{n.GRPCAddr()}, Verify: mgr.Verify})
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
// on its gRPC address, failing fast, 300 ms bound). Node deaths and leader changes are
// not job events: a cluster watcher polls Members and Status every 250 ms
// and keeps the last 512 changes in memory (lost when the node restarts).
//
// # HTTP API (JSON; times are Unix milliseconds)
//
//	GET  /api/cluster                          members, Raft state per member, slot placement with leases
//	GET  /api/cluster/events                   server-sent events: "cluster" (a node or leader change)
//	GET  /api/jobs                             every job
//	GET  /api/jobs/{job}                       one job with its checkpoints and restores
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
// X-Raftps-Request (a cross-site form cannot send it) and are refused with
// 403 when Config.ReadOnly is set. gRPC errors map to HTTP statuses
// (NotFound 404, FailedPrecondition 409, InvalidArgument 400, Unavailable
// 503, DeadlineExceeded 504) with the server's message.
//
// # Assets
//
// The page (ui/index.html, app.js, style.css) and the charting library
// (uPlot, vendored under ui/vendor/uplot with its licence and pinned
// version; scripts/vendor-web.sh re-vendors it) are embedded with go:embed:
// nothing is fetched at run time and no served file names an external URL
// (TestAssetsNameNoExternalURL), so an air-gapped cluster sees the same
// page. The page is a single document with three views (#/cluster,
// #/jobs, #/jobs/<job>).
package dashboard
