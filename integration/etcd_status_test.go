package integration

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/etcdapi"
)

// etcdctlStatus is one entry of `etcdctl endpoint status -w json`.
type etcdctlStatus struct {
	Endpoint string `json:"Endpoint"`
	Status   struct {
		Version     string `json:"version"`
		DbSize      int64  `json:"dbSize"`
		DbSizeInUse int64  `json:"dbSizeInUse"`
	} `json:"Status"`
}

func endpointStatusJSON(t *testing.T, flags, eps []string) etcdctlStatus {
	t.Helper()
	out, errOut, err := etcdctl(t, flags, eps, "", "endpoint", "status", "-w", "json")
	if err != nil {
		t.Fatalf("etcdctl endpoint status: %v\n%s", err, errOut)
	}
	var sts []etcdctlStatus
	if err := json.Unmarshal([]byte(out), &sts); err != nil || len(sts) != 1 {
		t.Fatalf("etcdctl endpoint status -w json: %v\n%s", err, out)
	}
	return sts[0]
}

// TestEtcdctlEndpointStatusVersionAndSize (issue 37): Debian's etcdctl
// (3.4) side by side on a raftps node and an etcd 3.4 node: raftps's
// VERSION is the etcd API version it follows in etcd's x.y.z form, and its
// DB SIZE is the node's Raft data on disk (raftps endpoint status's db_size), not
// 0 B.
func TestEtcdctlEndpointStatusVersionAndSize(t *testing.T) {
	ensureEtcdTools(t)
	c := NewCluster(t, binPath, 1, "--roles", "server")
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	mustCLI(t, c, c.Procs[0], "kv", "put", "/size/a", "1")
	etcdEps := startEtcd(t, 1)

	raftps := endpointStatusJSON(t, localcluster.CLIFlags(c.Admin()), grpcEndpoints(c))
	etcd := endpointStatusJSON(t, nil, etcdEps)
	var ownOut struct {
		Endpoints []struct {
			DBSize int64 `json:"db_size"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, c, c.Procs[0], "endpoint", "status", "-w", "json")), &ownOut); err != nil || len(ownOut.Endpoints) != 1 {
		t.Fatalf("raftps endpoint status -w json: %v %+v", err, ownOut)
	}
	own := ownOut.Endpoints[0]
	t.Logf("etcdctl endpoint status: raftps version %s, db size %d B (in use %d; raftps endpoint status: %d B); etcd version %s, db size %d B (in use %d)",
		raftps.Status.Version, raftps.Status.DbSize, raftps.Status.DbSizeInUse, own.DBSize, etcd.Status.Version, etcd.Status.DbSize, etcd.Status.DbSizeInUse)
	semver := regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	if !semver.MatchString(raftps.Status.Version) || raftps.Status.Version != etcdapi.Version || !semver.MatchString(etcd.Status.Version) {
		t.Errorf("VERSION: raftps %q (want etcd's form x.y.z, %s), etcd %q", raftps.Status.Version, etcdapi.Version, etcd.Status.Version)
	}
	// The log grows between the two reads; within a factor of 2.
	if raftps.Status.DbSize <= 0 || raftps.Status.DbSizeInUse != raftps.Status.DbSize ||
		raftps.Status.DbSize > 2*own.DBSize || own.DBSize > 2*raftps.Status.DbSize {
		t.Errorf("DB SIZE: raftps %d B (in use %d), raftps endpoint status says %d B", raftps.Status.DbSize, raftps.Status.DbSizeInUse, own.DBSize)
	}
}
