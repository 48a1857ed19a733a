package checkpoint

// Fuzz targets for the bytes this package reads from disk and peers
// (issue 19): manifests, GetBlob and PutBlob streams, export files and the
// blocks a decoder hands to the exporter. Run one at a time, e.g.
//
//	go test -run XXX -fuzz FuzzDecodeManifest -fuzztime 3m ./pserver/checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"testing"

	"google.golang.org/grpc/metadata"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// FuzzDecodeManifest: any bytes either decode into a manifest that keeps
// its invariants (bounded slots and vshards, sizes that sum without
// overflow to its total, vshards of its slot) and re-encodes to a manifest
// that decodes equal, or fail with ErrCorrupt; never a panic.
func FuzzDecodeManifest(f *testing.F) {
	h := MD5Hex(nil)
	for _, m := range []Manifest{
		{UUID: "u", Job: "j", Version: 1, Slot: 0, NumPservers: 1, VShards: []VShardRef{{ID: 0, MD5: h, Bytes: 3}}, Bytes: 3},
		{UUID: "u", Job: "j", Version: 7, Slot: 1, NumPservers: 2, VShards: []VShardRef{{ID: 1, MD5: h, Bytes: 1}, {ID: 3, MD5: h}}, Bytes: 1},
	} {
		raw, _ := json.Marshal(m)
		f.Add(raw)
	}
	f.Add([]byte(`{"job":"j","version":1,"num_pservers":2147483647,"vshards":[],"bytes":0}`))
	f.Add([]byte(`{"job":"j","version":1,"num_pservers":1,"vshards":[{"id":0,"md5":"` + h + `","bytes":9223372036854775807},{"id":1,"md5":"` + h + `","bytes":9223372036854775807}],"bytes":-2}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := DecodeManifest(raw)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if m.NumPservers <= 0 || m.NumPservers > MaxManifestPservers || m.Slot < 0 || m.Slot >= m.NumPservers || len(m.VShards) > MaxManifestVShards {
			t.Fatalf("accepted out of bounds: %+v", m)
		}
		var sum int64
		for _, v := range m.VShards {
			if v.Bytes < 0 || v.Bytes > MaxBlobSize || v.ID%m.NumPservers != m.Slot {
				t.Fatalf("accepted bad vshard %+v", v)
			}
			sum += v.Bytes
		}
		if sum != m.Bytes || sum < 0 {
			t.Fatalf("sizes sum to %d, manifest says %d", sum, m.Bytes)
		}
		raw2, _, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeManifest(raw2)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		a, _ := json.Marshal(m)
		b, _ := json.Marshal(m2)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip differs:\n%s\n%s", a, b)
		}
	})
}

// chunkStream splits data into chunks at the given cut points.
func chunkStream(first *pb.BlobChunk, rest []byte, cuts []byte) []*pb.BlobChunk {
	out := []*pb.BlobChunk{first}
	for _, c := range cuts {
		if len(rest) == 0 {
			break
		}
		n := min(int(c)+1, len(rest))
		out = append(out, &pb.BlobChunk{Data: rest[:n]})
		rest = rest[n:]
	}
	if len(rest) > 0 {
		out = append(out, &pb.BlobChunk{Data: rest})
	}
	return out
}

func recvFrom(chunks []*pb.BlobChunk) func() (*pb.BlobChunk, error) {
	return func() (*pb.BlobChunk, error) {
		if len(chunks) == 0 {
			return nil, io.EOF
		}
		c := chunks[0]
		chunks = chunks[1:]
		return c, nil
	}
}

// FuzzRecvGetBlob: the client side of a GetBlob stream from a peer that may
// lie about sizes, hashes and lengths: it returns the blob only if it is
// exactly size bytes hashing to the md5 asked for, and otherwise an error;
// never a panic, never more than size bytes buffered.
func FuzzRecvGetBlob(f *testing.F) {
	f.Add([]byte("hello"), []byte(" world"), []byte{2, 0}, int64(11), int64(11), true)
	f.Add([]byte("x"), []byte{}, []byte{}, int64(-1), int64(-1), true)
	f.Add([]byte("abc"), []byte("defgh"), []byte{0, 0, 0}, int64(3), int64(3), false)
	f.Fuzz(func(t *testing.T, head, rest, cuts []byte, announced, promised int64, honestMD5 bool) {
		whole := append(bytes.Clone(head), rest...)
		want := MD5Hex(whole)
		md5hex := want
		if !honestMD5 {
			md5hex = MD5Hex(head)
		}
		chunks := chunkStream(&pb.BlobChunk{Md5: md5hex, Size: announced, Data: head}, rest, cuts)
		data, err := recvGetBlob(recvFrom(chunks), md5hex, promised)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if int64(len(data)) != promised || MD5Hex(data) != md5hex || int64(cap(data)) > promised {
			t.Fatalf("accepted %d bytes (cap %d) hashing to %s for a promised %d bytes %s", len(data), cap(data), MD5Hex(data), promised, md5hex)
		}
	})
}

// fakePutStream is a PutBlob server stream fed from a slice of chunks.
type fakePutStream struct {
	recv func() (*pb.BlobChunk, error)
	resp *pb.PutBlobResponse
}

func (s *fakePutStream) Recv() (*pb.BlobChunk, error)             { return s.recv() }
func (s *fakePutStream) SendAndClose(r *pb.PutBlobResponse) error { s.resp = r; return nil }
func (s *fakePutStream) SetHeader(metadata.MD) error              { return nil }
func (s *fakePutStream) SendHeader(metadata.MD) error             { return nil }
func (s *fakePutStream) SetTrailer(metadata.MD)                   {}
func (s *fakePutStream) Context() context.Context                 { return context.Background() }
func (s *fakePutStream) SendMsg(any) error                        { return nil }
func (s *fakePutStream) RecvMsg(any) error                        { return nil }

// FuzzPutBlobStream: the service's PutBlob fed any chunk sequence: it
// stores a blob only when the bytes received are exactly the announced
// size and hash to the announced md5 (and then GetBlob returns them), a
// manifest only if it decodes under its key; never a panic.
func FuzzPutBlobStream(f *testing.F) {
	f.Add([]byte("hello"), []byte(" world"), []byte{1}, int64(11), true, []byte(nil), "")
	f.Add([]byte("x"), []byte{}, []byte{}, int64(4<<30), true, []byte(nil), "")
	f.Add([]byte{}, []byte{}, []byte{}, int64(0), false, []byte(`{"keep":[9223372036854775807]}`), "delete/j/0")
	h := MD5Hex([]byte("m"))
	raw, _ := json.Marshal(Manifest{UUID: "u", Job: "j", Version: 1, Slot: 0, NumPservers: 1, VShards: []VShardRef{{ID: 0, MD5: h, Bytes: 1}}, Bytes: 1})
	f.Add([]byte("m"), []byte{}, []byte{}, int64(1), true, raw, ManifestKey("j", 1, 0))
	// One Store for every input: opening Pebble per input would dominate.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := Open(f.TempDir(), quiet)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	svc := NewService(st, quiet)
	f.Fuzz(func(t *testing.T, head, rest, cuts []byte, size int64, withMD5 bool, manifest []byte, key string) {
		whole := append(bytes.Clone(head), rest...)
		md5hex := ""
		if withMD5 {
			md5hex = MD5Hex(whole)
		}
		chunks := chunkStream(&pb.BlobChunk{Md5: md5hex, Size: size, Data: head, Manifest: manifest, ManifestKey: key}, rest, cuts)
		s := &fakePutStream{recv: recvFrom(chunks)}
		err := svc.PutBlob(s)
		if err != nil {
			return
		}
		if md5hex != "" {
			if int64(len(whole)) != size {
				t.Fatalf("stored a blob of %d bytes announced as %d", len(whole), size)
			}
			got, err := st.GetBlob(md5hex)
			if err != nil || !bytes.Equal(got, whole) {
				t.Fatalf("stored blob does not read back: %v", err)
			}
		}
		if key != "" {
			m, err := DecodeManifest(manifest)
			if err != nil || m.Key() != key {
				t.Fatalf("stored a manifest that does not decode under its key %q: %v", key, err)
			}
		}
	})
}

// FuzzReadExportHeader: any file start either yields a header or
// ErrCorrupt, allocating as the bytes arrive.
func FuzzReadExportHeader(f *testing.F) {
	var buf bytes.Buffer
	dec := DecoderFunc(func([]byte) ([]Block, error) {
		return []Block{{Name: "w", Shape: []int64{2, 2}, Data: []float32{1, 2, 3, 4}}}, nil
	})
	if err := WriteExport(&buf, ExportHeader{Job: "j", Version: 1}, map[int32][]byte{0: nil}, dec); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	pre := binary.LittleEndian.AppendUint32([]byte(ExportMagic), ExportFormatVersion)
	f.Add(binary.LittleEndian.AppendUint32(bytes.Clone(pre), math.MaxUint32))
	f.Add(append(binary.LittleEndian.AppendUint32(bytes.Clone(pre), 1<<30), '{'))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadExportHeader(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerFormat) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if h == nil {
			t.Fatal("nil header without an error")
		}
	})
}

// fuzzBlocks parses b into export blocks: per block a name byte, a rank
// (0-3), that many int64 dims, an int64 offset and a value count (0-255).
func fuzzBlocks(b []byte) []Block {
	var out []Block
	for len(b) >= 3 {
		name, rank := string('a'+b[0]%3), int(b[1]%4)
		b = b[2:]
		var shape []int64
		for range rank {
			if len(b) < 8 {
				return out
			}
			shape = append(shape, int64(binary.LittleEndian.Uint64(b)))
			b = b[8:]
		}
		if len(b) < 9 {
			return out
		}
		off := int64(binary.LittleEndian.Uint64(b))
		n := int(b[8])
		b = b[9:]
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(i)
		}
		out = append(out, Block{Name: name, Shape: shape, Offset: off, Data: data})
	}
	return out
}

// FuzzWriteExport: crafted blocks (any shapes, offsets, lengths) are
// exported or refused with ErrCorrupt, never a panic; an export writes
// exactly the header plus 4 bytes per value of every parameter, and reads
// back. Parameters of more than 2^20 values that are otherwise valid are
// skipped (they would only take long to write).
func FuzzWriteExport(f *testing.F) {
	le := binary.LittleEndian
	blk := func(name byte, dims []int64, off int64, n byte) []byte {
		b := []byte{name, byte(len(dims))}
		for _, d := range dims {
			b = le.AppendUint64(b, uint64(d))
		}
		return append(le.AppendUint64(b, uint64(off)), n)
	}
	f.Add(blk(0, []int64{4}, 0, 4))
	f.Add(append(blk(0, []int64{8}, 0, 4), blk(0, []int64{8}, 4, 4)...))
	f.Add(blk(1, []int64{4}, math.MaxInt64, 1))
	f.Add(blk(1, []int64{1 << 34}, 0, 1))
	f.Add(blk(2, []int64{3, 1 << 62}, 0, 1))
	f.Add(blk(2, nil, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		blocks := fuzzBlocks(b)
		shapes := map[string][]int64{}
		for _, bl := range blocks {
			if n, err := shapeValues(bl.Shape); err == nil && n > 1<<20 {
				return
			}
			if _, ok := shapes[bl.Name]; !ok {
				shapes[bl.Name] = bl.Shape
			}
		}
		dec := DecoderFunc(func([]byte) ([]Block, error) { return blocks, nil })
		var out bytes.Buffer
		err := WriteExport(&out, ExportHeader{Job: "j", Version: 1}, map[int32][]byte{0: nil}, dec)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		r := bytes.NewReader(out.Bytes())
		h, err := ReadExportHeader(r)
		if err != nil {
			t.Fatalf("export does not read back: %v", err)
		}
		var total int64
		for _, p := range h.Params {
			n, err := shapeValues(p.Shape)
			if err != nil || p.Bytes != 4*n || p.Offset != total {
				t.Fatalf("param %+v: %d values (%v), offset want %d", p, n, err, total)
			}
			total += p.Bytes
		}
		if int64(r.Len()) != total {
			t.Fatalf("data section %d bytes, header says %d", r.Len(), total)
		}
	})
}
