// Package deploy holds raftps's deployment files; it has no Go code of its
// own, only tests that check the files (deploy_test.go) and start three
// nodes from each with loopback addresses and refuse an unauthenticated
// write (start_test.go):
//   - systemd/: raftps.service and the node config file it starts from
//     (mutual TLS and a gossip keyring from files under the state
//     directory, made with `raftps tls` and `raftps keyring generate`);
//   - kubernetes/: a StatefulSet and a headless Service that start nodes
//     with --join through DNS and --bootstrap-expect 3, mutual TLS and a
//     gossip keyring from the Secret raftps-tls, decoded strictly into the
//     Kubernetes API types by the test;
//   - grafana/: a dashboard whose every query names a metric the node
//     exports (checked by dashboard's test).
package deploy
