package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/schema"
)

// ChunkSize is the size of the data pieces of a streamed blob (1 MiB).
const ChunkSize = 1 << 20

// ReplicationStreams is how many blobs Replicate sends concurrently.
const ReplicationStreams = 2

// MaxBlobSize bounds the size of one blob: a PutBlob stream may announce
// no more, and a manifest may name no bigger blob.
const MaxBlobSize = 4 << 30

// MaxStreamsPerPeer bounds the PutBlob streams one peer (by IP address)
// may have open on a node at once; more get ResourceExhausted.
var MaxStreamsPerPeer = 8

// MaxDeleteVersions bounds the versions one DeleteVersions request names.
const MaxDeleteVersions = 1 << 12

// Service serves a Store over the pb.CheckpointStore gRPC service.
type Service struct {
	pb.UnimplementedCheckpointStoreServer
	store  *Store
	meta   Meta // nil: DeleteVersions is refused, manifests are never replaced
	logger *slog.Logger

	mu      sync.Mutex
	streams map[string]int // open PutBlob streams per peer IP
}

var _ pb.CheckpointStoreServer = (*Service)(nil)

// NewService returns the gRPC service of store. Register it with
// pb.RegisterCheckpointStoreServer(grpcServer, svc).
func NewService(store *Store, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{store: store, logger: logger.With("component", "checkpoint-service"), streams: map[string]int{}}
}

// WithMeta gives the service the metadata store, against whose committed
// pointers it checks DeleteVersions requests and manifest replacements;
// without it those are refused (ErrNoPointer, ErrConflict). It returns s.
func (s *Service) WithMeta(meta Meta) *Service {
	s.meta = meta
	return s
}

// enter counts a PutBlob stream of the calling peer; leave must follow.
func (s *Service) enter(ctx context.Context) (leave func(), err error) {
	who := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		who = p.Addr.String()
		if host, _, err := net.SplitHostPort(who); err == nil {
			who = host
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[who] >= MaxStreamsPerPeer {
		return nil, fmt.Errorf("%w: %s has %d PutBlob streams open (at most %d)", ErrBusy, who, s.streams[who], MaxStreamsPerPeer)
	}
	s.streams[who]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.streams[who]--; s.streams[who] <= 0 {
			delete(s.streams, who)
		}
	}, nil
}

// PutBlob receives one blob in chunks (md5, size and optionally a manifest in
// the first chunk), verifies its MD5, stores it synced, and then stores the
// manifest if one was attached. A first chunk with an empty md5 and size 0
// carries only a manifest (stored if all its blobs are present). The
// buffer grows with the data received, never beyond the announced size; a
// peer has at most MaxStreamsPerPeer streams open. A manifest already
// stored is never replaced by different bytes (ErrConflict), except an
// uncommitted attempt that the slot's committed pointer does not name
// (when the service has Meta).
func (s *Service) PutBlob(stream grpc.ClientStreamingServer[pb.BlobChunk, pb.PutBlobResponse]) error {
	leave, err := s.enter(stream.Context())
	if err != nil {
		return rpctypes.ToStatus(err)
	}
	defer leave()
	first, err := stream.Recv()
	if err != nil {
		return rpctypes.ToStatus(fmt.Errorf("%w: put blob: no first chunk: %v", ErrInvalid, err))
	}
	md5hex, size := first.GetMd5(), first.GetSize()
	if size < 0 || size > MaxBlobSize || (md5hex != "" && !isMD5Hex(md5hex)) || (md5hex == "" && (size != 0 || len(first.GetData()) > 0)) {
		return rpctypes.ToStatus(fmt.Errorf("%w: put blob: md5 %q size %d", ErrInvalid, md5hex, size))
	}
	var data []byte
	if md5hex != "" {
		data, err = recvBlob(first, stream.Recv, size)
		if err != nil {
			return rpctypes.ToStatus(fmt.Errorf("blob %s: %w", md5hex, err))
		}
		if err := s.store.PutBlob(md5hex, data); err != nil {
			s.logger.Warn("put blob rejected", "md5", md5hex, "err", err)
			return rpctypes.ToStatus(err)
		}
	}
	if key := first.GetManifestKey(); key != "" {
		if err := s.putManifest(stream.Context(), key, first.GetManifest()); err != nil {
			s.logger.Warn("put manifest rejected", "key", key, "err", err)
			return rpctypes.ToStatus(err)
		}
	}
	return stream.SendAndClose(&pb.PutBlobResponse{Bytes: int64(len(data))})
}

// putManifest stores a peer's manifest; a different manifest already stored
// under key is replaced only if the slot's committed pointer neither names
// that version nor is older than it (an uncommitted attempt of a writer
// that lost its claim).
func (s *Service) putManifest(ctx context.Context, key string, raw []byte) error {
	err := s.store.PutManifestRaw(key, raw)
	if !errors.Is(err, ErrConflict) || s.meta == nil {
		return err
	}
	m, derr := DecodeManifest(raw)
	if derr != nil {
		return derr
	}
	kv, gerr := getKV(ctx, s.meta, schema.CheckpointKey(m.Job, m.Slot))
	if gerr != nil {
		return fmt.Errorf("%w (cannot read the pointer: %v)", err, gerr)
	}
	if kv != nil {
		p, perr := DecodePointer(kv.GetValue())
		if perr != nil || m.Version <= p.GetVersion() || holds(p, m.Version) {
			return err
		}
	}
	return s.store.replaceManifestRaw(key, raw)
}

// recvBlob collects a blob of exactly size bytes from first and then recv
// until io.EOF. The buffer grows with the data, never past size: a peer
// announcing more than it sends costs nothing. Errors wrap ErrCorrupt
// (more or fewer bytes than announced) or are recv's.
func recvBlob(first *pb.BlobChunk, recv func() (*pb.BlobChunk, error), size int64) ([]byte, error) {
	if size < 0 || size > MaxBlobSize {
		return nil, fmt.Errorf("%w: blob of %d bytes (at most %d)", ErrCorrupt, size, int64(MaxBlobSize))
	}
	var data []byte
	add := func(p []byte) error {
		if int64(len(p)) > size-int64(len(data)) {
			return fmt.Errorf("%w: more than the announced %d bytes", ErrCorrupt, size)
		}
		if need := len(data) + len(p); need > cap(data) {
			// Double, but never past size.
			grown := make([]byte, len(data), min(size, int64(max(2*cap(data), need))))
			copy(grown, data)
			data = grown
		}
		data = append(data, p...)
		return nil
	}
	if err := add(first.GetData()); err != nil {
		return nil, err
	}
	for {
		c, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := add(c.GetData()); err != nil {
			return nil, err
		}
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("%w: got %d of %d bytes", ErrCorrupt, len(data), size)
	}
	return data, nil
}

// DeleteVersions deletes versions of a slot that this node holds and that
// the slot's committed pointer no longer names: only versions older than
// the pointer's and not among its kept versions (a newer one may be a
// checkpoint in flight). Versions it does not hold are skipped. Errors:
// InvalidArgument (bad job, slot or list), FailedPrecondition (no Meta, or
// no committed pointer to check against).
func (s *Service) DeleteVersions(ctx context.Context, req *pb.DeleteVersionsRequest) (*pb.DeleteVersionsResponse, error) {
	deleted, err := s.deleteVersions(ctx, req)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	return &pb.DeleteVersionsResponse{Deleted: deleted}, nil
}

func (s *Service) deleteVersions(ctx context.Context, req *pb.DeleteVersionsRequest) ([]int64, error) {
	job, slot, vs := req.GetJob(), req.GetSlot(), req.GetVersions()
	if err := validJob(job); err != nil {
		return nil, err
	}
	if slot < 0 || slot >= MaxManifestPservers || len(vs) == 0 || len(vs) > MaxDeleteVersions {
		return nil, fmt.Errorf("%w: delete versions: slot %d, %d versions (1 to %d)", ErrInvalid, slot, len(vs), MaxDeleteVersions)
	}
	if s.meta == nil {
		return nil, fmt.Errorf("%w: this node cannot read pointers to check a delete", ErrNoPointer)
	}
	kv, err := getKV(ctx, s.meta, schema.CheckpointKey(job, slot))
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, fmt.Errorf("%w: %s slot %d has no committed pointer", ErrNoPointer, job, slot)
	}
	p, err := DecodePointer(kv.GetValue())
	if err != nil {
		return nil, fmt.Errorf("%w: pointer of %s slot %d: %v", ErrNoPointer, job, slot, err)
	}
	var victims []int64
	for _, v := range vs {
		if v > 0 && v < p.GetVersion() && !holds(p, v) {
			victims = append(victims, v)
		}
	}
	deleted, named, err := s.store.deleteVersionList(job, slot, victims)
	if err != nil {
		return deleted, err
	}
	if len(deleted) > 0 {
		if _, err := s.store.GCBlobs(named); err != nil {
			s.logger.Warn("blob gc after delete failed (orphans are harmless)", "err", err)
		}
	}
	return deleted, nil
}

// GetBlob streams blob md5 in ChunkSize pieces after re-verifying it
// (DataLoss if corrupt, NotFound if absent).
func (s *Service) GetBlob(req *pb.GetBlobRequest, stream grpc.ServerStreamingServer[pb.BlobChunk]) error {
	data, err := s.store.GetBlob(req.GetMd5())
	if err != nil {
		return rpctypes.ToStatus(err)
	}
	return sendChunks(data, &pb.BlobChunk{Md5: req.GetMd5(), Size: int64(len(data))}, stream.Send)
}

// GetManifest returns the raw manifest stored under key.
func (s *Service) GetManifest(_ context.Context, req *pb.GetManifestRequest) (*pb.GetManifestResponse, error) {
	raw, err := s.store.GetManifest(req.GetKey())
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	return &pb.GetManifestResponse{Manifest: raw}, nil
}

// VerifyBlob re-hashes the stored blob.
func (s *Service) VerifyBlob(_ context.Context, req *pb.VerifyBlobRequest) (*pb.VerifyBlobResponse, error) {
	present, ok, actual, err := s.store.VerifyBlob(req.GetMd5())
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	return &pb.VerifyBlobResponse{Present: present, Ok: ok, ActualMd5: actual}, nil
}

func sendChunks(data []byte, first *pb.BlobChunk, send func(*pb.BlobChunk) error) error {
	c := first
	off := 0
	for {
		n := min(ChunkSize, len(data)-off)
		c.Data = data[off : off+n]
		if err := send(c); err != nil {
			return err
		}
		off += n
		if off >= len(data) {
			return nil
		}
		c = &pb.BlobChunk{}
	}
}

// Client copies checkpoints to and from other nodes' CheckpointStore
// services. Connections are cached per address. It is safe for concurrent use.
type Client struct {
	// ProbeTimeout bounds the liveness probe Replicate sends first (5 s).
	ProbeTimeout time.Duration

	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewClient returns a Client dialing with opts (insecure transport if none).
func NewClient(opts ...grpc.DialOption) *Client {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return &Client{ProbeTimeout: 5 * time.Second, opts: opts, conns: map[string]*grpc.ClientConn{}}
}

func (c *Client) stub(addr string) (pb.CheckpointStoreClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return pb.NewCheckpointStoreClient(cc), nil
	}
	cc, err := grpc.NewClient(addr, c.opts...)
	if err != nil {
		return nil, fmt.Errorf("dial checkpoint store %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return pb.NewCheckpointStoreClient(cc), nil
}

// Close closes every cached connection. Safe to call twice.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for a, cc := range c.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.conns, a)
	}
	return first
}

// Replicate copies every blob of m (skipping those the node already holds
// intact) and then m itself to the node at addr. blobs maps vshard id to
// bytes as in m. On return without error the node has synced all of them.
func (c *Client) Replicate(ctx context.Context, addr string, m *Manifest, blobs map[int32][]byte) error {
	raw, _, err := EncodeManifest(m)
	if err != nil {
		return err
	}
	for _, r := range m.VShards {
		if _, ok := blobs[r.ID]; !ok {
			return fmt.Errorf("%w: replicate %s: no bytes for vshard %d", ErrInvalid, m.Key(), r.ID)
		}
	}
	// A dead or partitioned node fails here in seconds, so the caller can
	// pick another one before its own deadline.
	pctx, pcancel := context.WithTimeout(ctx, c.ProbeTimeout)
	_, err = c.VerifyBlob(pctx, addr, MD5Hex(nil))
	pcancel()
	if err != nil {
		return fmt.Errorf("replicate %s: %s does not answer: %w", m.Key(), addr, err)
	}
	// Two streams in flight: one is hashed/synced by the receiver while the
	// next is on the wire.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan VShardRef)
	errc := make(chan error, ReplicationStreams)
	for w := 0; w < ReplicationStreams; w++ {
		go func() {
			var first error
			for r := range work {
				if first != nil {
					continue
				}
				if v, err := c.VerifyBlob(ctx, addr, r.MD5); err == nil && v.GetOk() {
					continue
				}
				if err := c.PutBlob(ctx, addr, r.MD5, blobs[r.ID]); err != nil {
					first = fmt.Errorf("replicate %s vshard %d to %s: %w", m.Key(), r.ID, addr, err)
					cancel()
				}
			}
			errc <- first
		}()
	}
	for _, r := range m.VShards {
		work <- r
	}
	close(work)
	var firstErr error
	for w := 0; w < ReplicationStreams; w++ {
		if err := <-errc; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if err := c.put(ctx, addr, &pb.BlobChunk{Manifest: raw, ManifestKey: m.Key()}, nil); err != nil {
		return fmt.Errorf("replicate manifest %s to %s: %w", m.Key(), addr, err)
	}
	return nil
}

// PutBlob streams one blob to addr in ChunkSize pieces.
func (c *Client) PutBlob(ctx context.Context, addr, md5hex string, data []byte) error {
	return c.put(ctx, addr, &pb.BlobChunk{Md5: md5hex, Size: int64(len(data))}, data)
}

func (c *Client) put(ctx context.Context, addr string, first *pb.BlobChunk, data []byte) error {
	stub, err := c.stub(addr)
	if err != nil {
		return err
	}
	stream, err := stub.PutBlob(ctx)
	if err != nil {
		return rpctypes.FromStatus(err)
	}
	if err := sendChunks(data, first, stream.Send); err != nil && err != io.EOF {
		return rpctypes.FromStatus(err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return rpctypes.FromStatus(err)
	}
	return nil
}

// DeleteVersions asks the node at addr to delete versions of (job, slot)
// that the slot's committed pointer no longer names; it returns the
// versions deleted there.
func (c *Client) DeleteVersions(ctx context.Context, addr, job string, slot int32, versions []int64) ([]int64, error) {
	stub, err := c.stub(addr)
	if err != nil {
		return nil, err
	}
	resp, err := stub.DeleteVersions(ctx, &pb.DeleteVersionsRequest{Job: job, Slot: slot, Versions: versions})
	if err != nil {
		return nil, rpctypes.FromStatus(err)
	}
	return resp.GetDeleted(), nil
}

// GetBlob fetches blob md5hex of size bytes (as its manifest says) from
// addr and verifies its MD5 (ErrCorrupt if the bytes do not match or the
// peer sends more or fewer than size, ErrNotFound if the node does not
// hold it). It never buffers more than size bytes.
func (c *Client) GetBlob(ctx context.Context, addr, md5hex string, size int64) ([]byte, error) {
	stub, err := c.stub(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the peer's stream if we give up early
	stream, err := stub.GetBlob(ctx, &pb.GetBlobRequest{Md5: md5hex})
	if err != nil {
		return nil, rpctypes.FromStatus(err)
	}
	recv := func() (*pb.BlobChunk, error) {
		ch, err := stream.Recv()
		if err != nil && err != io.EOF {
			return nil, rpctypes.FromStatus(err)
		}
		return ch, err
	}
	data, err := recvGetBlob(recv, md5hex, size)
	if err != nil {
		return nil, fmt.Errorf("blob %s from %s: %w", md5hex, addr, err)
	}
	return data, nil
}

// recvGetBlob reads a GetBlob stream: the first chunk must announce md5hex
// and size (a peer announcing another size, or a negative one, is refused
// before anything is allocated), then the data up to size, MD5 verified.
func recvGetBlob(recv func() (*pb.BlobChunk, error), md5hex string, size int64) ([]byte, error) {
	first, err := recv()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: empty stream", ErrCorrupt)
	}
	if err != nil {
		return nil, err
	}
	if first.GetSize() != size || (first.GetMd5() != "" && first.GetMd5() != md5hex) {
		return nil, fmt.Errorf("%w: peer announces md5 %q size %d, manifest says %s size %d", ErrCorrupt, first.GetMd5(), first.GetSize(), md5hex, size)
	}
	data, err := recvBlob(first, recv, size)
	if err != nil {
		return nil, err
	}
	if got := MD5Hex(data); got != md5hex {
		return nil, fmt.Errorf("%w: hashes to %s", ErrCorrupt, got)
	}
	return data, nil
}

// GetManifest fetches the raw manifest key from addr.
func (c *Client) GetManifest(ctx context.Context, addr, key string) ([]byte, error) {
	stub, err := c.stub(addr)
	if err != nil {
		return nil, err
	}
	resp, err := stub.GetManifest(ctx, &pb.GetManifestRequest{Key: key})
	if err != nil {
		return nil, rpctypes.FromStatus(err)
	}
	return resp.GetManifest(), nil
}

// VerifyBlob asks addr to re-hash blob md5hex.
func (c *Client) VerifyBlob(ctx context.Context, addr, md5hex string) (*pb.VerifyBlobResponse, error) {
	stub, err := c.stub(addr)
	if err != nil {
		return nil, err
	}
	resp, err := stub.VerifyBlob(ctx, &pb.VerifyBlobRequest{Md5: md5hex})
	if err != nil {
		return nil, rpctypes.FromStatus(err)
	}
	return resp, nil
}

// Fetch reads manifest manifestKey and all its blobs from addr, every blob
// MD5 verified. It returns the decoded manifest, its raw bytes and the blobs
// by vshard id.
func (c *Client) Fetch(ctx context.Context, addr, manifestKey string) (*Manifest, []byte, map[int32][]byte, error) {
	raw, err := c.GetManifest(ctx, addr, manifestKey)
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := DecodeManifest(raw)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fetch %s from %s: %w", manifestKey, addr, err)
	}
	blobs := make(map[int32][]byte, len(m.VShards))
	for _, r := range m.VShards {
		b, err := c.GetBlob(ctx, addr, r.MD5, r.Bytes)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("fetch %s vshard %d from %s: %w", manifestKey, r.ID, addr, err)
		}
		blobs[r.ID] = b
	}
	return m, raw, blobs, nil
}
