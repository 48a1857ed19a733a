package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ChunkSize is the size of the data pieces of a streamed blob (1 MiB).
const ChunkSize = 1 << 20

// ReplicationStreams is how many blobs Replicate sends concurrently.
const ReplicationStreams = 2

// MaxBlobSize bounds the size a PutBlob stream may announce (the receiver
// allocates it up front).
const MaxBlobSize = 4 << 30

// deleteKeyPrefix marks a PutBlob stream that carries no blob but a request
// to delete versions of one slot: manifest_key "delete/<job>/<slot>",
// manifest = JSON deleteRequest. It stands in for a DeleteVersions RPC that
// api/pserver.proto does not have yet.
const deleteKeyPrefix = "delete/"

type deleteRequest struct {
	Keep []int64 `json:"keep"`
}

// Service serves a Store over the pb.CheckpointStore gRPC service.
type Service struct {
	pb.UnimplementedCheckpointStoreServer
	store  *Store
	logger *slog.Logger
}

var _ pb.CheckpointStoreServer = (*Service)(nil)

// NewService returns the gRPC service of store. Register it with
// pb.RegisterCheckpointStoreServer(grpcServer, svc).
func NewService(store *Store, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{store: store, logger: logger.With("component", "checkpoint-service")}
}

// PutBlob receives one blob in chunks (md5, size and optionally a manifest in
// the first chunk), verifies its MD5, stores it synced, and then stores the
// manifest if one was attached. A first chunk with an empty md5 and size 0
// carries only a manifest (stored if all its blobs are present) or a delete
// request (manifest_key "delete/<job>/<slot>").
func (s *Service) PutBlob(stream grpc.ClientStreamingServer[pb.BlobChunk, pb.PutBlobResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return toStatus(fmt.Errorf("%w: put blob: no first chunk: %v", ErrInvalid, err))
	}
	md5hex, size := first.GetMd5(), first.GetSize()
	if size < 0 || size > MaxBlobSize || (md5hex != "" && !isMD5Hex(md5hex)) {
		return toStatus(fmt.Errorf("%w: put blob: md5 %q size %d", ErrInvalid, md5hex, size))
	}
	var data []byte
	if md5hex != "" {
		data = make([]byte, 0, size)
		data = append(data, first.GetData()...)
		for {
			c, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if int64(len(data)+len(c.GetData())) > size {
				return toStatus(fmt.Errorf("%w: blob %s: more than the announced %d bytes", ErrCorrupt, md5hex, size))
			}
			data = append(data, c.GetData()...)
		}
		if int64(len(data)) != size {
			return toStatus(fmt.Errorf("%w: blob %s: got %d of %d bytes", ErrCorrupt, md5hex, len(data), size))
		}
		if err := s.store.PutBlob(md5hex, data); err != nil {
			s.logger.Warn("put blob rejected", "md5", md5hex, "err", err)
			return toStatus(err)
		}
	}
	if key := first.GetManifestKey(); key != "" {
		if rest, ok := strings.CutPrefix(key, deleteKeyPrefix); ok {
			if err := s.handleDelete(rest, first.GetManifest()); err != nil {
				return toStatus(err)
			}
		} else if err := s.store.PutManifestRaw(key, first.GetManifest()); err != nil {
			s.logger.Warn("put manifest rejected", "key", key, "err", err)
			return toStatus(err)
		}
	}
	return stream.SendAndClose(&pb.PutBlobResponse{Bytes: int64(len(data))})
}

func (s *Service) handleDelete(rest string, body []byte) error {
	job, slotStr, ok := strings.Cut(rest, "/")
	slot, err := strconv.ParseInt(slotStr, 10, 32)
	if !ok || err != nil {
		return fmt.Errorf("%w: delete request %q", ErrInvalid, rest)
	}
	var req deleteRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return fmt.Errorf("%w: delete request body: %v", ErrInvalid, err)
	}
	if len(req.Keep) == 0 {
		return fmt.Errorf("%w: delete request with an empty keep list", ErrInvalid)
	}
	_, err = s.store.DeleteVersions(job, int32(slot), req.Keep)
	return err
}

// GetBlob streams blob md5 in ChunkSize pieces after re-verifying it
// (DataLoss if corrupt, NotFound if absent).
func (s *Service) GetBlob(req *pb.GetBlobRequest, stream grpc.ServerStreamingServer[pb.BlobChunk]) error {
	data, err := s.store.GetBlob(req.GetMd5())
	if err != nil {
		return toStatus(err)
	}
	return sendChunks(data, &pb.BlobChunk{Md5: req.GetMd5(), Size: int64(len(data))}, stream.Send)
}

// GetManifest returns the raw manifest stored under key.
func (s *Service) GetManifest(_ context.Context, req *pb.GetManifestRequest) (*pb.GetManifestResponse, error) {
	raw, err := s.store.GetManifest(req.GetKey())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetManifestResponse{Manifest: raw}, nil
}

// VerifyBlob re-hashes the stored blob.
func (s *Service) VerifyBlob(_ context.Context, req *pb.VerifyBlobRequest) (*pb.VerifyBlobResponse, error) {
	present, ok, actual, err := s.store.VerifyBlob(req.GetMd5())
	if err != nil {
		return nil, toStatus(err)
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

// toStatus is the one table mapping package errors to gRPC codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isSentinel(err) {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrCorrupt):
		code = codes.DataLoss
	case errors.Is(err, ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, ErrClosed):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

func isSentinel(err error) bool {
	for _, s := range []error{ErrNotFound, ErrCorrupt, ErrInvalid, ErrClosed, ErrFenced, ErrStaleVersion} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// fromStatus maps a gRPC status back to the package's sentinels.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, st.Message())
	case codes.DataLoss:
		return fmt.Errorf("%w: %s", ErrCorrupt, st.Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", ErrInvalid, st.Message())
	}
	return err
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
		return fromStatus(err)
	}
	if err := sendChunks(data, first, stream.Send); err != nil && err != io.EOF {
		return fromStatus(err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return fromStatus(err)
	}
	return nil
}

// deleteVersions asks the node at addr to delete the manifests of (job, slot)
// not in keep and garbage-collect its blobs.
func (c *Client) deleteVersions(ctx context.Context, addr, job string, slot int32, keep []int64) error {
	body, _ := json.Marshal(deleteRequest{Keep: keep})
	key := fmt.Sprintf("%s%s/%d", deleteKeyPrefix, job, slot)
	return c.put(ctx, addr, &pb.BlobChunk{Manifest: body, ManifestKey: key}, nil)
}

// GetBlob fetches blob md5hex from addr and verifies its MD5 (ErrCorrupt if
// the bytes do not match, ErrNotFound if the node does not hold it).
func (c *Client) GetBlob(ctx context.Context, addr, md5hex string) ([]byte, error) {
	stub, err := c.stub(addr)
	if err != nil {
		return nil, err
	}
	stream, err := stub.GetBlob(ctx, &pb.GetBlobRequest{Md5: md5hex})
	if err != nil {
		return nil, fromStatus(err)
	}
	var data []byte
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fromStatus(err)
		}
		if data == nil {
			data = make([]byte, 0, ch.GetSize())
		}
		data = append(data, ch.GetData()...)
	}
	if got := MD5Hex(data); got != md5hex {
		return nil, fmt.Errorf("%w: blob %s from %s hashes to %s", ErrCorrupt, md5hex, addr, got)
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
		return nil, fromStatus(err)
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
		return nil, fromStatus(err)
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
		b, err := c.GetBlob(ctx, addr, r.MD5)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("fetch %s vshard %d from %s: %w", manifestKey, r.ID, addr, err)
		}
		blobs[r.ID] = b
	}
	return m, raw, blobs, nil
}
