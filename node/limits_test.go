package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"testing"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
)

// peerAs returns a context whose gRPC peer presented the certificate of a
// client with role (a verified chain, as the TLS server leaves it).
func peerAs(t *testing.T, pki *localcluster.PKI, name, role string) context.Context {
	t.Helper()
	files, err := pki.IssueClient(name, role, "job")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(files.Cert)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}})
}

// TestRoleValueLimit is issue 32 hole 6 (value size): a trainer wrote
// 1.4 MB values. A caller that is neither admin nor node may write values
// of at most MaxRoleValueSize, in puts and txns of raftps's and etcd's KV;
// admins keep the store's limit, and a node without TLS has no roles.
func TestRoleValueLimit(t *testing.T) {
	pki, err := localcluster.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	trainer, admin := peerAs(t, pki, "t1", "trainer"), peerAs(t, pki, "root", "admin")
	big := make([]byte, 1400<<10)
	small := make([]byte, MaxRoleValueSize)
	bigTxn := &etcdpb.TxnRequest{Success: []*etcdpb.RequestOp{{Request: &etcdpb.RequestOp_RequestPut{
		RequestPut: &etcdpb.PutRequest{Key: []byte("/jobs/job/trainers/t1-x"), Value: big}}}}}
	ok := func(context.Context, any) (any, error) { return "handled", nil }
	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  any
		want codes.Code
	}{
		{"trainer put 1.4 MB", trainer, &pb.PutRequest{Key: []byte("/jobs/job/trainers/t1-x"), Value: big}, codes.InvalidArgument},
		{"trainer etcd txn 1.4 MB", trainer, bigTxn, codes.InvalidArgument},
		{"trainer raftps txn 1.4 MB", trainer, &pb.TxnRequest{Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
			RequestPut: &pb.PutRequest{Key: []byte("k"), Value: big}}}}}, codes.InvalidArgument},
		{"trainer put at the limit", trainer, &pb.PutRequest{Key: []byte("/jobs/job/trainers/t1"), Value: small}, codes.OK},
		{"admin etcd txn 1.4 MB", admin, bigTxn, codes.OK},
		{"no TLS", context.Background(), bigTxn, codes.OK},
	} {
		out, err := roleValueLimit(tc.ctx, tc.req, &grpc.UnaryServerInfo{FullMethod: "/x/Put"}, ok)
		if status.Code(err) != tc.want {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.want == codes.OK && out != "handled" {
			t.Fatalf("%s: handler not called", tc.name)
		}
		if tc.want != codes.OK && !strings.Contains(err.Error(), "role trainer") {
			t.Fatalf("%s: %v does not name the role's limit", tc.name, err)
		}
	}
}
