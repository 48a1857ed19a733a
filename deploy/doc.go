// Package deploy holds raftps's deployment files; it has no Go code of its
// own, only a test (deploy_test.go) that checks the files:
//   - systemd/: raftps.service and the node config file it starts from;
//   - kubernetes/: a StatefulSet and a headless Service that start nodes
//     with --join through DNS and --bootstrap-expect 3, decoded strictly
//     into the Kubernetes API types by the test;
//   - grafana/: a dashboard whose every query names a metric the node
//     exports (checked by dashboard's test).
package deploy
