// Command raftps-bench measures raftps against etcd and its own baselines
// (package bench). It is not part of the product binary: `make bench`
// builds both, installs etcd with scripts/install-etcd.sh and runs
//
//	raftps-bench --bin bin/raftps
//
// Flags say where the raftps binary is (--bin, default bin/raftps), where
// results go (--out, default bench/results), which sections to skip
// (--skip kv,etcdclient,failover,training,gobench,profile) and whether to
// keep the clusters' data dirs (--keep-data); --quick shortens every
// section (2 s per workload, 3 recovery trials).
// Each side-by-side row runs its two sides interleaved (A B A B, at least
// 5 pairs) and reports the median ratio with its min-max spread, because
// this machine is shared and absolute times do not hold. Results are a
// Markdown table and a JSON file per run under bench/results.
package main
