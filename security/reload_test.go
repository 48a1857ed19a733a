package security

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// blockingWatch answers each Watch with one response and then holds the
// stream open until the client or the connection ends it.
type blockingWatch struct{ pb.UnimplementedWatchServer }

func (blockingWatch) Watch(_ *pb.WatchRequest, s pb.Watch_WatchServer) error {
	if err := s.Send(&pb.WatchResponse{}); err != nil {
		return err
	}
	<-s.Context().Done()
	return s.Context().Err()
}

// TestStreamsClosedAfterCARotation (issue 32): a stream opened with a
// certificate of the old CA ends (Unavailable) once the server reloads a
// new CA that no longer trusts it; a stream of a certificate the new CA
// still trusts (a bundle of both) keeps flowing. Before, live streams
// kept their identity until they ended by themselves.
func TestStreamsClosedAfterCARotation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keepOld  bool // the new CA file holds the old CA too
		wantCode codes.Code
		within   time.Duration // the stream's deadline
	}{{"new CA only", false, codes.Unavailable, 30 * time.Second}, {"bundle of both", true, codes.DeadlineExceeded, 10 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPKI(t)
			srvFiles := p.node("n1")
			srv := mustLoad(t, srvFiles)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			must(t, err)
			g := grpc.NewServer(grpc.Creds(srv.ServerCredentials()))
			pb.RegisterWatchServer(g, blockingWatch{})
			go func() { _ = g.Serve(lis) }()
			t.Cleanup(g.Stop)

			cli := mustLoad(t, p.issue("bob", CertRequest{Role: RoleReader}))
			cc, err := grpc.NewClient(lis.Addr().String(), cli.DialOptions()...)
			must(t, err)
			t.Cleanup(func() { cc.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			w, err := pb.NewWatchClient(cc).Watch(ctx, &pb.WatchRequest{Key: []byte("/x")})
			must(t, err)
			if _, err := w.Recv(); err != nil {
				t.Fatalf("first response: %v", err)
			}

			// Rotate the server to a new CA (and a node certificate of it).
			ca2, ca2PEM, _, err := NewCA("new CA", 1)
			must(t, err)
			c, k, err := ca2.Issue(CertRequest{Name: "n1", Role: RoleNode, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
			must(t, err)
			if tc.keepOld {
				old, err := os.ReadFile(srvFiles.CA)
				must(t, err)
				ca2PEM = append(ca2PEM, old...)
			}
			dir := t.TempDir()
			rotated := Files{CA: dir + "/ca.pem", Cert: dir + "/n1.pem", Key: dir + "/n1-key.pem"}
			for f, b := range map[string][]byte{rotated.CA: ca2PEM, rotated.Cert: c, rotated.Key: k} {
				must(t, WriteFile(f, b, true))
			}
			for _, pair := range [][2]string{{rotated.CA, srvFiles.CA}, {rotated.Cert, srvFiles.Cert}, {rotated.Key, srvFiles.Key}} {
				must(t, os.Rename(pair[0], pair[1]))
			}
			srv.Reload()

			_, err = w.Recv()
			if status.Code(err) != tc.wantCode {
				t.Fatalf("stream after the rotation: %v, want %v", err, tc.wantCode)
			}
		})
	}
}
