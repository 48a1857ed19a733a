package etcdapi

import (
	"context"
	"slices"

	"github.com/hashicorp/raft"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

type clusterServer struct {
	etcdpb.UnimplementedClusterServer
	s *Server
}

// membershipHint is where raftps' membership changes are made instead.
const membershipHint = "change raftps membership with raftps' own commands: a node joins with `raftps node --join` (or `raftps member add NAME --peer-urls RAFT_ADDR [--learner]`, then `raftps member promote ID`), and `raftps member remove ID` removes a server that is gone for good"

// urlScheme is the scheme of the members' URLs as seen by the caller:
// https:// if the call came over TLS, else http://. A raftps cluster runs
// all its nodes in one mode (mutual TLS, or --insecure), so the caller's
// connection tells how every member's client port is served; etcd's
// clients dial an http:// URL in plaintext whatever TLS they were given
// (etcdctl's `endpoint status --cluster`, clientv3's Sync).
func urlScheme(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		if _, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			return "https://"
		}
	}
	return "http://"
}

// MemberList lists the Raft configuration: voters as members, non-voters
// as learners, sorted by member id as etcd sorts them. URLs are https://
// when the call came over TLS (urlScheme).
func (c clusterServer) MemberList(ctx context.Context, _ *etcdpb.MemberListRequest) (*etcdpb.MemberListResponse, error) {
	servers, err := c.s.store.Configuration()
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	scheme := urlScheme(ctx)
	out := &etcdpb.MemberListResponse{Header: c.s.header(0)}
	for _, srv := range servers {
		id := string(srv.ID)
		m := &etcdpb.Member{ID: MemberID(id), Name: id, PeerURLs: []string{scheme + string(srv.Address)},
			IsLearner: srv.Suffrage != raft.Voter}
		if c.s.members != nil {
			if gm, ok := c.s.members.Member(id); ok && gm.Meta.GRPCAddr != "" {
				m.ClientURLs = []string{scheme + gm.Meta.GRPCAddr}
			}
		}
		out.Members = append(out.Members, m)
	}
	slices.SortFunc(out.Members, func(a, b *etcdpb.Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// MemberAdd is not served (membershipHint).
func (clusterServer) MemberAdd(ctx context.Context, _ *etcdpb.MemberAddRequest) (*etcdpb.MemberAddResponse, error) {
	return nil, ToStatus(ctx, unimplemented("MemberAdd: %s", membershipHint))
}

// MemberRemove is not served (membershipHint).
func (clusterServer) MemberRemove(ctx context.Context, _ *etcdpb.MemberRemoveRequest) (*etcdpb.MemberRemoveResponse, error) {
	return nil, ToStatus(ctx, unimplemented("MemberRemove: %s", membershipHint))
}

// MemberUpdate is not served (membershipHint).
func (clusterServer) MemberUpdate(ctx context.Context, _ *etcdpb.MemberUpdateRequest) (*etcdpb.MemberUpdateResponse, error) {
	return nil, ToStatus(ctx, unimplemented("MemberUpdate: %s", membershipHint))
}

// MemberPromote is not served (membershipHint).
func (clusterServer) MemberPromote(ctx context.Context, _ *etcdpb.MemberPromoteRequest) (*etcdpb.MemberPromoteResponse, error) {
	return nil, ToStatus(ctx, unimplemented("MemberPromote: %s", membershipHint))
}
