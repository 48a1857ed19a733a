package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TensorCodecName is the gRPC content-subtype of tensorCodec. The Client
// asks for it on every call; a server process that imports this package
// has it registered. Other clients (plain protobuf) are served as usual.
const TensorCodecName = "raftps-tensor"

func init() { encoding.RegisterCodecV2(tensorCodec{}) }

// tensorCodec speaks the protobuf wire format of api/pserver.proto (any
// protobuf peer can read what it writes), but moves tensor data without
// the extra copies of the generic codec:
//
//   - Marshal of PullResponse, PushResponse and PushRequest emits the
//     small field headers and references each Tensor.data in place (the
//     caller must not mutate it until the call completes; Slot.Pull and
//     Slot.Push return fresh copies and the Client waits for the push's
//     reply);
//   - Unmarshal of PullResponse and PushRequest reads each data field
//     straight from the received frames into its own buffer, and a
//     *PullSink (the Client's pull target, given for a Pull or for a Push
//     with pull set, whose reply has PullResponse's field numbers) reads
//     it straight into the trainer's parameter arrays.
//
// Every other message goes through the standard protobuf codec.
type tensorCodec struct{}

func (tensorCodec) Name() string { return TensorCodecName }

// inlineBytes: data shorter than this is copied into the header buffer.
const inlineBytes = 4096

func (tensorCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *pb.PullResponse:
		return marshalParams(m.Version, m.Incarnation, m.Tensors, takeLent(m)), nil
	case *pb.PushResponse: // PullResponse's field numbers
		return marshalParams(m.Version, m.Incarnation, m.Tensors, takeLent(m)), nil
	case *pb.PushRequest:
		w := &sliceWriter{}
		w.stringField(1, m.Job)
		w.varintField(2, uint64(int64(m.Slot)))
		w.stringField(3, m.Trainer)
		w.varintField(4, uint64(m.Version))
		w.varintField(5, uint64(m.Step))
		w.varintField(7, uint64(m.Examples))
		w.varintField(8, m.PushId)
		if m.Pull {
			w.varintField(9, 1)
		}
		w.varintField(10, uint64(m.Incarnation))
		w.varintField(11, uint64(m.Epoch))
		for _, t := range m.Grads {
			w.tensor(6, t)
		}
		return w.finish(), nil
	case *pb.ReplicateRequest:
		return marshalReplicate(m), nil
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%s codec: cannot marshal %T", TensorCodecName, v)
	}
	b, err := proto.Marshal(pm)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// marshalParams writes a PullResponse (or a PushResponse, which has the
// same field numbers). lent, if not nil, is the buffer the tensors' data
// alias, returned to the data pool once gRPC has written the reply.
func marshalParams(version, incarnation int64, ts []*pb.Tensor, lent []byte) mem.BufferSlice {
	w := &sliceWriter{lent: lent}
	w.varintField(1, uint64(version))
	w.varintField(3, uint64(incarnation))
	for _, t := range ts {
		w.tensor(2, t)
	}
	return w.finish()
}

func (tensorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *pb.PullResponse:
		r := newWireReader(data)
		defer r.close()
		return r.pullResponse(m, nil)
	case *PullSink:
		r := newWireReader(data)
		defer r.close()
		return r.pullResponse(&pb.PullResponse{}, m)
	case *pb.PushRequest:
		r := newWireReader(data)
		r.pooled = true
		defer r.close()
		return r.pushRequest(m)
	case *pb.ReplicateRequest:
		r := newWireReader(data)
		r.pooled = true
		defer r.close()
		return r.replicateRequest(m)
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("%s codec: cannot unmarshal into %T", TensorCodecName, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), pm)
}

// sliceWriter builds a BufferSlice of header runs and referenced data.
type sliceWriter struct {
	hdr   []byte
	parts []part
	lent  []byte // see marshalParams
}

type part struct {
	hdrEnd int    // header bytes [prev hdrEnd, hdrEnd) precede data
	data   []byte // referenced, not copied
}

func (w *sliceWriter) varintField(num protowire.Number, v uint64) {
	if v != 0 {
		w.hdr = protowire.AppendTag(w.hdr, num, protowire.VarintType)
		w.hdr = protowire.AppendVarint(w.hdr, v)
	}
}

func (w *sliceWriter) stringField(num protowire.Number, s string) {
	if s != "" {
		w.hdr = protowire.AppendTag(w.hdr, num, protowire.BytesType)
		w.hdr = protowire.AppendString(w.hdr, s)
	}
}

func (w *sliceWriter) tensor(num protowire.Number, t *pb.Tensor) {
	var rowsLen int
	for _, r := range t.Rows {
		rowsLen += protowire.SizeVarint(uint64(r))
	}
	size := 0
	if t.Name != "" {
		size += protowire.SizeTag(1) + protowire.SizeBytes(len(t.Name))
	}
	if t.Block != 0 {
		size += protowire.SizeTag(2) + protowire.SizeVarint(uint64(t.Block))
	}
	if len(t.Rows) > 0 {
		size += protowire.SizeTag(3) + protowire.SizeBytes(rowsLen)
	}
	if len(t.Data) > 0 {
		size += protowire.SizeTag(4) + protowire.SizeBytes(len(t.Data))
	}
	w.hdr = protowire.AppendTag(w.hdr, num, protowire.BytesType)
	w.hdr = protowire.AppendVarint(w.hdr, uint64(size))
	w.stringField(1, t.Name)
	w.varintField(2, uint64(t.Block))
	if len(t.Rows) > 0 {
		w.hdr = protowire.AppendTag(w.hdr, 3, protowire.BytesType)
		w.hdr = protowire.AppendVarint(w.hdr, uint64(rowsLen))
		for _, r := range t.Rows {
			w.hdr = protowire.AppendVarint(w.hdr, uint64(r))
		}
	}
	if len(t.Data) > 0 {
		w.hdr = protowire.AppendTag(w.hdr, 4, protowire.BytesType)
		w.hdr = protowire.AppendVarint(w.hdr, uint64(len(t.Data)))
		if len(t.Data) < inlineBytes {
			w.hdr = append(w.hdr, t.Data...)
		} else {
			w.parts = append(w.parts, part{hdrEnd: len(w.hdr), data: t.Data})
		}
	}
}

func (w *sliceWriter) finish() mem.BufferSlice {
	out := make(mem.BufferSlice, 0, 2*len(w.parts)+1)
	var rel *lentRelease
	if w.lent != nil {
		if len(w.parts) == 0 { // every tensor was copied into the header
			PutDataBuf(w.lent)
		} else {
			rel = &lentRelease{buf: w.lent}
			rel.parts.Store(int32(len(w.parts)))
		}
	}
	start := 0
	for _, p := range w.parts {
		if p.hdrEnd > start {
			out = append(out, mem.SliceBuffer(w.hdr[start:p.hdrEnd]))
		}
		if rel != nil {
			// A pooled Buffer: gRPC frees it once written (p.data is
			// at least inlineBytes, above gRPC's pooling threshold).
			out = append(out, mem.NewBuffer(&p.data, rel))
		} else {
			out = append(out, mem.SliceBuffer(p.data))
		}
		start = p.hdrEnd
	}
	if len(w.hdr) > start {
		out = append(out, mem.SliceBuffer(w.hdr[start:]))
	}
	return out
}

// PullSink is the Client's pull target: dense blocks are read from the
// received frames straight into the parameter arrays.
type PullSink struct {
	Layout      *Layout
	Slot        int32 // the slot asked: blocks of any other slot are refused
	Dst         map[string][]float32
	Version     int64 // the reply's version
	Incarnation int64 // the reply's incarnation
	Placed      int   // blocks written into dst
}

// wireReader decodes protobuf wire format from a BufferSlice, one limit
// (remaining bytes of the current message) at a time.
type wireReader struct {
	// pooled: large data fields come from dataBufs (server-side pushes,
	// released by Server after the push was applied).
	pooled bool
	mr     *mem.Reader
	br     *bufio.Reader
	rem    int // bytes left in the current (sub)message
}

func newWireReader(data mem.BufferSlice) *wireReader {
	mr := data.Reader()
	return &wireReader{mr: mr, br: bufio.NewReaderSize(mr, 512), rem: data.Len()}
}

func (r *wireReader) close() { r.mr.Close() }

var errWire = errors.New("pserver: malformed protobuf")

func (r *wireReader) ReadByte() (byte, error) {
	if r.rem <= 0 {
		return 0, errWire
	}
	r.rem--
	return r.br.ReadByte()
}

func (r *wireReader) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, errWire
	}
	return v, nil
}

func (r *wireReader) full(b []byte) error {
	if len(b) > r.rem {
		return errWire
	}
	r.rem -= len(b)
	if _, err := io.ReadFull(r.br, b); err != nil {
		return errWire
	}
	return nil
}

func (r *wireReader) length() (int, error) {
	n, err := r.uvarint()
	if err != nil || n > uint64(r.rem) {
		return 0, errWire
	}
	return int(n), nil
}

func (r *wireReader) tag() (protowire.Number, protowire.Type, error) {
	t, err := r.uvarint()
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(t)
	if num <= 0 {
		return 0, 0, errWire
	}
	return num, typ, nil
}

func (r *wireReader) skip(typ protowire.Type) error {
	var n int
	switch typ {
	case protowire.VarintType:
		_, err := r.uvarint()
		return err
	case protowire.Fixed64Type:
		n = 8
	case protowire.Fixed32Type:
		n = 4
	case protowire.BytesType:
		var err error
		if n, err = r.length(); err != nil {
			return err
		}
	default:
		return errWire
	}
	if n > r.rem {
		return errWire
	}
	r.rem -= n
	if _, err := r.br.Discard(n); err != nil {
		return errWire
	}
	return nil
}

// sub runs fn over the next n bytes as a submessage.
func (r *wireReader) sub(n int, fn func() error) error {
	outer := r.rem - n
	r.rem = n
	if err := fn(); err != nil {
		return err
	}
	if r.rem != 0 {
		return errWire
	}
	r.rem = outer
	return nil
}

func (r *wireReader) str() (string, error) {
	n, err := r.length()
	if err != nil {
		return "", err
	}
	b := make([]byte, n)
	return string(b), r.full(b)
}

func (r *wireReader) pullResponse(m *pb.PullResponse, sink *PullSink) error {
	for r.rem > 0 {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case (num == 1 || num == 3) && typ == protowire.VarintType:
			v, err := r.uvarint()
			if err != nil {
				return err
			}
			if num == 1 {
				m.Version = int64(v)
			} else {
				m.Incarnation = int64(v)
			}
		case num == 2 && typ == protowire.BytesType:
			n, err := r.length()
			if err != nil {
				return err
			}
			t := &pb.Tensor{}
			if err := r.sub(n, func() error { return r.tensor(t, sink) }); err != nil {
				return err
			}
			if sink == nil {
				m.Tensors = append(m.Tensors, t)
			}
		default:
			if err := r.skip(typ); err != nil {
				return err
			}
		}
	}
	if sink != nil {
		sink.Version, sink.Incarnation = m.Version, m.Incarnation
	}
	return nil
}

func (r *wireReader) pushRequest(m *pb.PushRequest) error {
	for r.rem > 0 {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		if typ == protowire.VarintType && num != 6 {
			v, err := r.uvarint()
			if err != nil {
				return err
			}
			switch num {
			case 2:
				m.Slot = int32(v)
			case 4:
				m.Version = int64(v)
			case 5:
				m.Step = int64(v)
			case 7:
				m.Examples = int64(v)
			case 8:
				m.PushId = v
			case 9:
				m.Pull = v != 0
			case 10:
				m.Incarnation = int64(v)
			case 11:
				m.Epoch = int64(v)
			}
			continue
		}
		if typ != protowire.BytesType {
			if err := r.skip(typ); err != nil {
				return err
			}
			continue
		}
		switch num {
		case 1:
			m.Job, err = r.str()
		case 3:
			m.Trainer, err = r.str()
		case 6:
			var n int
			if n, err = r.length(); err == nil {
				t := &pb.Tensor{}
				err = r.sub(n, func() error { return r.tensor(t, nil) })
				m.Grads = append(m.Grads, t)
			}
		default:
			n, err2 := r.length()
			if err2 != nil {
				return err2
			}
			if n > r.rem {
				return errWire
			}
			r.rem -= n
			_, err = r.br.Discard(n)
		}
		if err != nil {
			return errWire
		}
	}
	return nil
}

// tensor decodes one Tensor; with a sink, dense data goes straight into
// the sink's parameter arrays (name and block precede data on the wire;
// otherwise it is buffered and placed at the end).
func (r *wireReader) tensor(t *pb.Tensor, sink *PullSink) error {
	for r.rem > 0 {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			if t.Name, err = r.str(); err != nil {
				return err
			}
		case num == 2 && typ == protowire.VarintType:
			v, err := r.uvarint()
			if err != nil {
				return err
			}
			t.Block = int64(v)
		case num == 3 && typ == protowire.VarintType:
			v, err := r.uvarint()
			if err != nil {
				return err
			}
			t.Rows = append(t.Rows, int64(v))
		case num == 3 && typ == protowire.BytesType:
			n, err := r.length()
			if err != nil {
				return err
			}
			if err := r.sub(n, func() error {
				for r.rem > 0 {
					v, err := r.uvarint()
					if err != nil {
						return err
					}
					t.Rows = append(t.Rows, int64(v))
				}
				return nil
			}); err != nil {
				return err
			}
		case num == 4 && typ == protowire.BytesType:
			n, err := r.length()
			if err != nil {
				return err
			}
			if sink != nil && t.Name != "" {
				dst, err := sink.target(t.Name, t.Block, n)
				if err != nil {
					return err
				}
				if err := r.full(dst); err != nil {
					return err
				}
				t.Data = nil
				t.Name = "" // placed
				continue
			}
			if sink == nil && r.pooled {
				t.Data = GetDataBuf(n)
			} else {
				t.Data = make([]byte, n)
			}
			if err := r.full(t.Data); err != nil {
				return err
			}
		default:
			if err := r.skip(typ); err != nil {
				return err
			}
		}
	}
	if sink != nil && t.Data != nil {
		dst, err := sink.target(t.Name, t.Block, len(t.Data))
		if err != nil {
			return err
		}
		copy(dst, t.Data)
	}
	return nil
}

// target returns the bytes of dst[name][block] (n bytes expected). A
// block the layout puts in another slot is refused: a pserver answers
// only for its own slot's blocks.
func (s *PullSink) target(name string, block int64, n int) ([]byte, error) {
	p, ok := s.Layout.Param(name)
	if !ok || p.Embedding || block < 0 || block >= p.Blocks {
		return nil, fmt.Errorf("pull: unexpected tensor %q block %d", name, block)
	}
	if owner := s.Layout.SlotOfBlock(p, block); owner != s.Slot {
		return nil, fmt.Errorf("pull: slot %d sent tensor %q block %d, which slot %d serves", s.Slot, name, block, owner)
	}
	s.Placed++
	lo, hi := s.Layout.BlockRange(p, block)
	if n != int(hi-lo)*4 {
		return nil, fmt.Errorf("pull: tensor %q block %d has %d bytes, want %d", name, block, n, (hi-lo)*4)
	}
	d := s.Dst[name][lo:hi]
	if LittleEndian {
		return Float32Bytes(d), nil
	}
	return nil, fmt.Errorf("pull: big-endian hosts need the protobuf codec")
}

// MinPooled is the smallest tensor data buffer (bytes) that dataBufs
// pools, by power-of-two capacity class, so a pserver does not allocate
// (and zero) tens of MB per push.
const MinPooled = 64 << 10

var dataBufs [40]sync.Pool

func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

func GetDataBuf(n int) []byte {
	if n < MinPooled {
		return make([]byte, n)
	}
	c := sizeClass(n)
	if b, ok := dataBufs[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

// ReleaseTensors returns the data buffers of ts to the pool; the caller
// guarantees nothing references them any more.
func ReleaseTensors(ts []*pb.Tensor) {
	for _, t := range ts {
		b := t.Data
		t.Data = nil
		PutDataBuf(b)
	}
}

// PutDataBuf returns b (from GetDataBuf) to the pool; the caller
// guarantees nothing references it any more.
func PutDataBuf(b []byte) {
	if c := cap(b); c >= MinPooled && c&(c-1) == 0 {
		b = b[:0]
		dataBufs[sizeClass(c)].Put(&b)
	}
}

// Lent replies. A whole-slot reply (Pull, or Push with pull) aliases one
// buffer from the data pool (Slot.pullAll) that nothing else references.
// For a call that uses the tensor codec the Server lends the buffer to the
// codec (LendReply) before gRPC marshals the reply; Marshal takes it back
// (takeLent) and wraps each referenced data run in a gRPC mem.Buffer whose
// release counts down a lentRelease, so the buffer returns to the pool
// once gRPC has written the last run, instead of a pserver allocating
// (and the runtime zeroing and collecting) a model-sized buffer per step:
// 10-15% of the CPU of a 100k-parameter PushPull.
//
// lent is keyed by the reply's address, not the reply, so that a reply
// never marshalled (an interceptor that drops it) is not kept alive: a
// cleanup deletes its entry once it is collected. A stale entry met by a
// later reply at the same address before that cleanup runs only returns
// the dead reply's buffer to the pool, which nothing references.
var lent sync.Map // uintptr → *[]byte

// LendReply lends buf, the buffer msg's tensors alias, to the tensor
// codec's Marshal of msg. A server built with ServerOptions uses that codec
// for every call; on another server the codec never takes the buffer
// back, and it is garbage as before (the entry goes with msg).
func LendReply[M any](_ context.Context, msg *M, buf []byte) {
	if cap(buf) < MinPooled {
		return
	}
	p, b := uintptr(unsafe.Pointer(msg)), &buf
	lent.Store(p, b)
	runtime.AddCleanup(msg, func(p uintptr) { lent.CompareAndDelete(p, b) }, p)
}

// takeLent returns and forgets the buffer lent for msg (nil if none).
func takeLent[M any](msg *M) []byte {
	if v, ok := lent.LoadAndDelete(uintptr(unsafe.Pointer(msg))); ok {
		return *v.(*[]byte)
	}
	return nil
}

// lentRelease is the gRPC mem.BufferPool of one lent reply's data runs:
// the last run gRPC frees returns the whole buffer to the data pool.
type lentRelease struct {
	buf   []byte
	parts atomic.Int32
}

func (r *lentRelease) Get(int) *[]byte { panic("pserver: lentRelease hands out no buffers") }

func (r *lentRelease) Put(*[]byte) {
	if r.parts.Add(-1) == 0 {
		PutDataBuf(r.buf)
		lentReturned.Add(1)
	}
}

// lentReturned counts lent reply buffers returned to the pool (for tests).
var lentReturned atomic.Int64

// LentBuffers reports how many lent reply buffers have gone back to the
// data pool since the process started, and how many are lent now (for
// tests: a whole-slot reply's buffer must come back once it is written).
func LentBuffers() (returned int64, outstanding int) {
	lent.Range(func(any, any) bool { outstanding++; return true })
	return lentReturned.Load(), outstanding
}

// TensorCallOption makes a call use the tensor codec.
var TensorCallOption = grpc.CallContentSubtype(TensorCodecName)

// dirtyPool is a gRPC mem.BufferPool of power-of-two classes that, unlike
// mem.DefaultBufferPool, does not zero reused buffers: gRPC overwrites
// every byte it hands out, and zeroing tens of MB per pull and push showed
// as 15% of CPU in BenchmarkPushPull.
type dirtyPool struct{ classes [32]sync.Pool }

var grpcBufs = &dirtyPool{}

func (p *dirtyPool) Get(n int) *[]byte {
	c := sizeClass(max(n, 1))
	if c >= len(p.classes) {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 || sizeClass(c) >= len(p.classes) {
		return
	}
	p.classes[sizeClass(c)].Put(b)
}
