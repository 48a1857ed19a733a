package node

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/security"
)

// keyringService is the Keyring gRPC service (`raftps keyring`): on the
// client port (admin) an operation fans out to every alive member's
// node-to-node port (node role) with local set; each member applies it to
// its memberlist keyring and rewrites its --gossip-keyring-file. Keys
// cross the network only over mutual TLS: without TLS the service
// refuses with FailedPrecondition.
type keyringService struct {
	pb.UnimplementedKeyringServer
	n  *Node
	mu sync.Mutex // one local change at a time (keyring and its file)
}

// openKeyring loads --gossip-keyring-file into a memberlist keyring.
func (n *Node) openKeyring() (*memberlist.Keyring, error) {
	if n.cfg.GossipKeyringFile == "" {
		return nil, nil
	}
	keys, err := security.LoadKeyringFile(n.cfg.GossipKeyringFile)
	if err != nil {
		return nil, fmt.Errorf("--gossip-keyring-file: %w", err)
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("--gossip-keyring-file %q: %w", n.cfg.GossipKeyringFile, err)
	}
	return kr, nil
}

func (s *keyringService) local(op string, req *pb.KeyringRequest) (*pb.NodeKeyring, error) {
	kr := s.n.keyring
	if kr == nil {
		return nil, rpctypes.ToStatus(fmt.Errorf("node %s: %w (start it with --gossip-keyring-file)", s.n.cfg.ID, errs.ErrGossipEncryptionOff))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	switch op {
	case "install":
		err = kr.AddKey(req.Key)
	case "use", "remove":
		var k []byte
		if k, err = security.MatchFingerprint(kr.GetKeys(), req.Fingerprint); err != nil {
			break
		}
		if op == "use" {
			err = kr.UseKey(k)
		} else if bytes.Equal(k, kr.GetPrimaryKey()) {
			err = fmt.Errorf("%w: %s is the primary key; make another primary first (raftps keyring use)", security.ErrKeyring, req.Fingerprint)
		} else {
			err = kr.RemoveKey(k)
		}
	}
	if err == nil && op != "list" {
		keys := [][]byte{kr.GetPrimaryKey()}
		for _, k := range kr.GetKeys() {
			if !bytes.Equal(k, keys[0]) {
				keys = append(keys, k)
			}
		}
		err = security.SaveKeyringFile(s.n.cfg.GossipKeyringFile, keys)
		s.n.log.Info("gossip keyring changed", "op", op, "primary", security.Fingerprint(keys[0]), "keys", len(keys))
	}
	out := &pb.NodeKeyring{Node: s.n.cfg.ID, Primary: security.Fingerprint(kr.GetPrimaryKey())}
	for _, k := range kr.GetKeys() {
		out.Fingerprints = append(out.Fingerprints, security.Fingerprint(k))
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out, nil
}

// do runs op here, and, unless req.Local, on every other alive member.
func (s *keyringService) do(ctx context.Context, op string, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	if s.n.tls == nil {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w (the keys would cross the network in plaintext)", errs.ErrNeedsMutualTLS))
	}
	if op == "install" {
		if n := len(req.Key); n != 16 && n != 24 && n != 32 {
			return nil, rpctypes.ToStatus(fmt.Errorf("%w: a gossip key of %d bytes, want 16, 24 or 32", errs.ErrInvalid, n))
		}
	}
	self, err := s.local(op, req)
	if err != nil {
		return nil, err
	}
	resp := &pb.KeyringResponse{Nodes: []*pb.NodeKeyring{self}}
	if req.Local {
		return resp, nil
	}
	fwd := &pb.KeyringRequest{Key: req.Key, Fingerprint: req.Fingerprint, Local: true}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, m := range s.n.gossip.Members() {
		if m.Meta.ID == s.n.cfg.ID || m.Status != gossip.StatusAlive {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.remote(ctx, m.Meta.Peer(), op, fwd)
			nk := &pb.NodeKeyring{Node: m.Meta.ID}
			if err != nil {
				nk.Error = err.Error()
			} else if len(r.Nodes) > 0 {
				nk = r.Nodes[0]
			}
			mu.Lock()
			resp.Nodes = append(resp.Nodes, nk)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return resp, nil
}

func (s *keyringService) remote(ctx context.Context, addr, op string, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	cc, err := grpc.NewClient(addr, s.n.dial...)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := pb.NewKeyringClient(cc)
	switch op {
	case "install":
		return c.InstallKey(ctx, req)
	case "use":
		return c.UseKey(ctx, req)
	case "remove":
		return c.RemoveKey(ctx, req)
	}
	return c.ListKeys(ctx, req)
}

func (s *keyringService) ListKeys(ctx context.Context, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	return s.do(ctx, "list", req)
}

func (s *keyringService) InstallKey(ctx context.Context, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	return s.do(ctx, "install", req)
}

func (s *keyringService) UseKey(ctx context.Context, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	return s.do(ctx, "use", req)
}

func (s *keyringService) RemoveKey(ctx context.Context, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	return s.do(ctx, "remove", req)
}
