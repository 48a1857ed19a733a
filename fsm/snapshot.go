package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"slices"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm/jobq"
)

// snapMagic opens an FSM snapshot; its last byte is the format version.
// Snapshot format (version 1). All integers are varints (protowire):
//
//	magic    "RPSFSM\x00\x01"
//	record*  tag(1 byte) length(uvarint) body
//	end      tagEnd length=4 CRC-32C (big endian) of every byte before it,
//	         the end tag included; then EOF.
//
// Records come in tag order: one meta, leases by id, key/values by key,
// events by revision, then the jobs: one record per job, by name, then the
// client sessions (session.go: a header and one record per kept Result). Every
// record is bounded (maxRecord), so no state, however large, needs one
// unbounded record. Older snapshots hold a 4-varint meta (no clock) and
// one whole-queue blob (tagJobs) instead; Restore reads both forms.
const snapMagic = "RPSFSM\x00\x01"

const (
	// tagMeta: applied(uvarint) revision compact_revision next_lease, then
	// the replicated clock: now term+1 mono wall (varints; absent in older
	// snapshots).
	tagMeta  = 1
	tagLease = 2 // id ttl (varints), then the owner's bytes (absent: no owner, and in older snapshots)
	tagKV    = 3 // pb.KeyValue
	tagEvent = 4 // pb.Event (revision = kv.mod_revision)
	tagJobs  = 5 // JobQueue.MarshalBinary: the whole queue (older snapshots; read only)
	tagJob   = 6 // one record of JobQueue.MarshalJobs
	// tagSession: one record of clientSessions.marshal (session.go);
	// absent in older snapshots.
	tagSession = 7
	tagEnd     = 0xff
)

// ErrNewerFormat: a snapshot was written by a newer raftps, in a format
// this build does not know; Restore refuses it and changes nothing.
var ErrNewerFormat = errors.New("fsm: snapshot written by a newer raftps")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type leaseRec struct {
	id, ttl int64
	owner   string
}

// snapshot is a point-in-time capture of the FSM. The tree is a
// copy-on-write clone and the history groups are immutable, so capturing is
// O(leases + history revisions) and Persist runs concurrently with Apply.
type snapshot struct {
	applied    uint64
	rev        int64
	compactRev int64
	nextLease  int64
	kvs        *btree.BTreeG[*pb.KeyValue]
	leases     []leaseRec
	hist       []revEvents
	clock      clock
	jobs       [][]byte
	sessions   [][]byte
}

// Snapshot captures the state under the lock; the returned FSMSnapshot's
// Persist does the encoding and I/O without holding it.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	jobs, err := f.jobs.MarshalJobs()
	if err != nil {
		return nil, fmt.Errorf("fsm: snapshot job queue: %w", err)
	}
	s := &snapshot{
		applied:    f.applied,
		rev:        f.rev,
		compactRev: f.compactRev,
		nextLease:  f.nextLease,
		kvs:        f.kvs.Clone(),
		hist:       slices.Clone(f.hist),
		clock:      f.clock,
		jobs:       jobs,
		sessions:   f.sessions.marshal(),
	}
	for _, id := range slices.Sorted(maps.Keys(f.leases)) {
		l := f.leases[id]
		s.leases = append(s.leases, leaseRec{id, l.ttl, l.owner})
	}
	return s, nil
}

// Persist writes the snapshot to sink and closes it (cancels it on error).
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release is a no-op: the snapshot holds only shared immutable data.
func (s *snapshot) Release() {}

func (s *snapshot) writeTo(w io.Writer) error {
	h := crc32.New(crcTable)
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	var buf []byte
	rec := func(tag byte, body []byte) error {
		buf = append(buf[:0], tag)
		buf = protowire.AppendVarint(buf, uint64(len(body)))
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		_, err := bw.Write(body)
		return err
	}
	if _, err := bw.WriteString(snapMagic); err != nil {
		return err
	}
	var body []byte
	body = protowire.AppendVarint(body, s.applied)
	body = protowire.AppendVarint(body, uint64(s.rev))
	body = protowire.AppendVarint(body, uint64(s.compactRev))
	body = protowire.AppendVarint(body, uint64(s.nextLease))
	body = protowire.AppendVarint(body, uint64(s.clock.now))
	body = protowire.AppendVarint(body, s.clock.term)
	body = protowire.AppendVarint(body, uint64(s.clock.mono))
	body = protowire.AppendVarint(body, uint64(s.clock.wall))
	if err := rec(tagMeta, body); err != nil {
		return err
	}
	for _, l := range s.leases {
		body = protowire.AppendVarint(body[:0], uint64(l.id))
		body = protowire.AppendVarint(body, uint64(l.ttl))
		body = append(body, l.owner...)
		if err := rec(tagLease, body); err != nil {
			return err
		}
	}
	mo := proto.MarshalOptions{Deterministic: true}
	var werr error
	s.kvs.Ascend(func(kv *pb.KeyValue) bool {
		body, werr = mo.MarshalAppend(body[:0], kv)
		if werr == nil {
			werr = rec(tagKV, body)
		}
		return werr == nil
	})
	if werr != nil {
		return werr
	}
	for _, g := range s.hist {
		for _, ev := range g.events {
			body, werr = mo.MarshalAppend(body[:0], ev)
			if werr == nil {
				werr = rec(tagEvent, body)
			}
			if werr != nil {
				return werr
			}
		}
	}
	for _, j := range s.jobs {
		if err := rec(tagJob, j); err != nil {
			return err
		}
	}
	for _, b := range s.sessions {
		if err := rec(tagSession, b); err != nil {
			return err
		}
	}
	if err := bw.WriteByte(tagEnd); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	trailer := protowire.AppendVarint(nil, 4)
	trailer = binary.BigEndian.AppendUint32(trailer, h.Sum32())
	_, err := w.Write(trailer)
	return err
}

// Restore replaces the whole state with the snapshot read from rc (and
// closes rc). The snapshot is decoded and validated completely into a new
// state first; a truncated, corrupt or inconsistent snapshot returns an
// error wrapping ErrMalformed (or the reader's error) and leaves the current
// state untouched. On success the observer gets a Notification with
// Restored set.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := decodeSnapshot(rc, f.newJobs)
	if err != nil {
		f.logger.Error("fsm: restore failed, state unchanged", "err", err)
		return err
	}
	f.mu.Lock()
	f.applied = st.applied
	f.rev = st.rev
	f.compactRev = st.compactRev
	f.nextLease = st.nextLease
	f.kvs = st.kvs
	f.recount()
	f.leases = st.leases
	f.leasesOf = map[string]int{}
	for _, l := range f.leases {
		f.leasesOf[l.owner]++
	}
	f.hist = st.hist
	f.histSize = st.histSize
	f.jobs = st.jobs
	f.clock = st.clock
	f.sessions = st.sessions
	n := Notification{Index: f.applied, Revision: f.rev, Restored: true}
	f.mu.Unlock()
	f.logger.Info("fsm: restored snapshot", "index", n.Index, "revision", n.Revision, "keys", st.kvs.Len(), "leases", len(st.leases))
	f.notify(n)
	return nil
}

type restored struct {
	applied    uint64
	rev        int64
	compactRev int64
	nextLease  int64
	kvs        *btree.BTreeG[*pb.KeyValue]
	leases     map[int64]*lease
	hist       []revEvents
	histSize   int64
	clock      clock
	jobs       JobQueue
	sessions   clientSessions
}

func (st *restored) addHist(rev int64, events []*pb.Event) {
	g := revEvents{rev: rev, size: eventsSize(events), events: events}
	st.hist = append(st.hist, g)
	st.histSize += g.size
}

// crcReader hashes every byte read through it.
type crcReader struct {
	r *bufio.Reader
	h hash.Hash32
	b [1]byte
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.b[0] = b
		c.h.Write(c.b[:])
	}
	return b, err
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: snapshot: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// readErr turns a short read into ErrMalformed (a truncated snapshot) and
// passes other reader errors through.
func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return malformed("truncated in %s", what)
	}
	return fmt.Errorf("fsm: snapshot: read %s: %w", what, err)
}

// maxRecord bounds each record's length by tag.
func maxRecord(tag byte) uint64 {
	switch tag {
	case tagMeta:
		return 96
	case tagLease:
		return 96 + MaxLeaseOwner
	case tagKV:
		return MaxKeySize + MaxValueSize + 128
	case tagEvent:
		return 2*(MaxKeySize+MaxValueSize) + 512
	case tagJobs:
		return 1 << 31
	case tagJob:
		return jobq.MaxJobRecordBytes + 16
	case tagSession:
		return maxSessionRecord
	}
	return 0
}

// decodeSnapshot reads a snapshot written by the encoder above: the magic,
// then records in tag order, each handed to its tag's restorer (restorers),
// then the CRC trailer. Errors: ErrNewerFormat for a snapshot of a later
// format, ErrMalformed for anything else it does not accept, or the
// reader's error.
func decodeSnapshot(r io.Reader, newJobs func() JobQueue) (*restored, error) {
	cr := &crcReader{r: bufio.NewReaderSize(r, 64<<10), h: crc32.New(crcTable)}
	if err := readMagic(cr); err != nil {
		return nil, err
	}
	d := &snapDecoder{st: &restored{kvs: newTree(), leases: map[int64]*lease{}}, newJobs: newJobs}
	var lastTag byte
	for {
		tag, err := cr.ReadByte()
		if err != nil {
			return nil, readErr("record tag", err)
		}
		if tag == tagEnd {
			if err := readTrailer(cr); err != nil {
				return nil, err
			}
			break
		}
		if tag < lastTag || tag > tagSession || tag == 0 || (tag == lastTag && (tag == tagMeta || tag == tagJobs)) ||
			(tag == tagJob && lastTag == tagJobs) {
			return nil, malformed("record tag %d after %d", tag, lastTag)
		}
		if tag != tagMeta && !d.haveMeta {
			return nil, malformed("record tag %d before meta", tag)
		}
		lastTag = tag
		body, err := readRecord(cr, tag)
		if err != nil {
			return nil, err
		}
		if err := restorers[tag](d, body); err != nil {
			return nil, err
		}
	}
	return d.finish()
}

// readMagic reads and checks the snapshot's magic (format) header.
func readMagic(cr *crcReader) error {
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(cr, magic); err != nil {
		return readErr("header", err)
	}
	if string(magic) != snapMagic {
		if string(magic[:len(snapMagic)-1]) == snapMagic[:len(snapMagic)-1] && magic[len(snapMagic)-1] > snapMagic[len(snapMagic)-1] {
			return fmt.Errorf("%w: snapshot format %d, this build reads formats up to %d; upgrade raftps on this node (`raftps version`) first",
				ErrNewerFormat, magic[len(snapMagic)-1], snapMagic[len(snapMagic)-1])
		}
		return malformed("bad magic %q", magic)
	}
	return nil
}

// readTrailer reads the end record's CRC (after tagEnd), checks it
// against every byte before it, and checks that nothing follows.
func readTrailer(cr *crcReader) error {
	sum := cr.h.Sum32()
	n, err := binary.ReadUvarint(cr)
	if err != nil {
		return readErr("trailer", err)
	}
	if n != 4 {
		return malformed("trailer length %d", n)
	}
	var b [4]byte
	if _, err := io.ReadFull(cr, b[:]); err != nil {
		return readErr("trailer", err)
	}
	if got := binary.BigEndian.Uint32(b[:]); got != sum {
		return malformed("checksum %08x, computed %08x", got, sum)
	}
	if _, err := cr.ReadByte(); err != io.EOF {
		if err != nil {
			return readErr("end", err)
		}
		return malformed("trailing bytes after end")
	}
	return nil
}

// readRecord reads the length and body of a record of tag (its tag byte
// already read), refusing a length above maxRecord(tag).
func readRecord(cr *crcReader, tag byte) ([]byte, error) {
	n, err := binary.ReadUvarint(cr)
	if err != nil {
		return nil, readErr("record length", err)
	}
	if n > maxRecord(tag) {
		return nil, malformed("record tag %d of %d bytes", tag, n)
	}
	body, err := io.ReadAll(io.LimitReader(cr, int64(n)))
	if err != nil {
		return nil, readErr("record", err)
	}
	if uint64(len(body)) != n {
		return nil, malformed("truncated in record tag %d", tag)
	}
	return body, nil
}

// snapDecoder is the state decodeSnapshot carries from record to record:
// the state restored so far and what the order checks need.
type snapDecoder struct {
	st       *restored
	newJobs  func() JobQueue
	lastKey  []byte
	lastRev  int64
	haveMeta bool
	events   []*pb.Event // of revision lastRev, not yet in st's history
	jobRecs  [][]byte
	sessRecs [][]byte
}

// restorers maps each record tag to the function that restores one record
// of it, as Consul's fsm registers a restorer per record type
// (registerRestorer). decodeSnapshot checks the tag's order and bounds
// before it calls one.
var restorers = [tagSession + 1]func(d *snapDecoder, body []byte) error{
	tagMeta:    (*snapDecoder).restoreMeta,
	tagLease:   (*snapDecoder).restoreLease,
	tagKV:      (*snapDecoder).restoreKV,
	tagEvent:   (*snapDecoder).restoreEvent,
	tagJobs:    (*snapDecoder).restoreJobs,
	tagJob:     func(d *snapDecoder, body []byte) error { d.jobRecs = append(d.jobRecs, body); return nil },
	tagSession: func(d *snapDecoder, body []byte) error { d.sessRecs = append(d.sessRecs, body); return nil },
}

// restoreMeta restores the meta record: applied index, revisions, next
// lease ID and the replicated clock (zero in older snapshots).
func (d *snapDecoder) restoreMeta(body []byte) error {
	st := d.st
	vals, err := varints(body, 8)
	if err != nil {
		if vals, err = varints(body, 4); err != nil { // an older snapshot: no clock
			return err
		}
		vals = append(vals, 0, 0, 0, 0)
	}
	st.applied, st.rev, st.compactRev, st.nextLease = vals[0], int64(vals[1]), int64(vals[2]), int64(vals[3])
	st.clock = clock{now: int64(vals[4]), term: vals[5], mono: int64(vals[6]), wall: int64(vals[7])}
	if st.clock.now < 0 || st.clock.mono < 0 {
		return malformed("meta clock %d mono %d", st.clock.now, st.clock.mono)
	}
	if st.rev < 1 || st.compactRev < 0 || st.compactRev > st.rev || st.nextLease < 1 {
		return malformed("meta revision %d compact %d next lease %d", st.rev, st.compactRev, st.nextLease)
	}
	d.haveMeta = true
	return nil
}

// restoreLease restores one lease (its keys come with their KV records).
func (d *snapDecoder) restoreLease(body []byte) error {
	vals, owner, err := varintsThen(body, 2)
	if err != nil {
		return err
	}
	id, ttl := int64(vals[0]), int64(vals[1])
	if id <= 0 || ttl <= 0 || len(owner) > MaxLeaseOwner {
		return malformed("lease %d ttl %d owner of %d bytes", id, ttl, len(owner))
	}
	if _, dup := d.st.leases[id]; dup {
		return malformed("duplicate lease %d", id)
	}
	d.st.leases[id] = &lease{ttl: ttl, owner: string(owner), keys: map[string]struct{}{}}
	return nil
}

// restoreKV restores one key (keys come in ascending order) and attaches
// it to its lease.
func (d *snapDecoder) restoreKV(body []byte) error {
	kv := &pb.KeyValue{}
	if err := proto.Unmarshal(body, kv); err != nil {
		return malformed("key/value: %v", err)
	}
	if err := checkKV(kv, d.st.rev); err != nil {
		return err
	}
	if d.lastKey != nil && bytes.Compare(kv.Key, d.lastKey) <= 0 {
		return malformed("key %q out of order", kv.Key)
	}
	d.lastKey = kv.Key
	if kv.Lease != 0 {
		l, ok := d.st.leases[kv.Lease]
		if !ok {
			return malformed("key %q on unknown lease %d", kv.Key, kv.Lease)
		}
		l.keys[string(kv.Key)] = struct{}{}
	}
	d.st.kvs.ReplaceOrInsert(kv)
	return nil
}

// restoreEvent restores one watch-history event (events come in revision
// order); the events of one revision enter the history together.
func (d *snapDecoder) restoreEvent(body []byte) error {
	st := d.st
	ev := &pb.Event{}
	if err := proto.Unmarshal(body, ev); err != nil {
		return malformed("event: %v", err)
	}
	rev := ev.GetKv().GetModRevision()
	if ev.Kv == nil || len(ev.Kv.Key) == 0 || rev <= st.compactRev || rev > st.rev || rev < d.lastRev {
		return malformed("event at revision %d (compact %d, store %d, previous %d)", rev, st.compactRev, st.rev, d.lastRev)
	}
	switch ev.Type {
	case pb.Event_PUT:
		if err := checkKV(ev.Kv, st.rev); err != nil {
			return err
		}
	case pb.Event_DELETE:
	default:
		return malformed("event type %d", int32(ev.Type))
	}
	if ev.PrevKv != nil {
		if err := checkKV(ev.PrevKv, st.rev); err != nil {
			return err
		}
	}
	if rev != d.lastRev && len(d.events) > 0 {
		st.addHist(d.lastRev, d.events)
		d.events = nil
	}
	d.lastRev = rev
	d.events = append(d.events, ev)
	return nil
}

// restoreJobs restores the whole job queue of an older snapshot.
func (d *snapDecoder) restoreJobs(body []byte) error {
	q := d.newJobs()
	if err := q.UnmarshalBinary(body); err != nil {
		if errors.Is(err, ErrMalformed) {
			return err
		}
		return malformed("job queue: %v", err)
	}
	d.st.jobs = q
	return nil
}

// finish restores what is whole only after the last record (the last
// revision's events, the job records, the sessions) and returns the state.
func (d *snapDecoder) finish() (*restored, error) {
	st := d.st
	if !d.haveMeta {
		return nil, malformed("no meta record")
	}
	if len(d.events) > 0 {
		st.addHist(d.lastRev, d.events)
	}
	if d.jobRecs != nil {
		q := d.newJobs()
		if err := q.UnmarshalJobs(d.jobRecs); err != nil {
			if errors.Is(err, ErrMalformed) {
				return nil, err
			}
			return nil, malformed("job records: %v", err)
		}
		st.jobs = q
	}
	if st.jobs == nil {
		st.jobs = d.newJobs()
	}
	sessions, err := unmarshalSessions(d.sessRecs)
	if err != nil {
		return nil, err
	}
	st.sessions = sessions
	return st, nil
}

func checkKV(kv *pb.KeyValue, rev int64) error {
	switch {
	case len(kv.Key) == 0 || len(kv.Key) > MaxKeySize || len(kv.Value) > MaxValueSize:
		return malformed("key/value of %d+%d bytes", len(kv.Key), len(kv.Value))
	case kv.CreateRevision < 1 || kv.ModRevision < kv.CreateRevision || kv.ModRevision > rev || kv.Version < 1 || kv.Lease < 0:
		return malformed("key %q: create %d mod %d version %d lease %d at store revision %d",
			kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, rev)
	}
	return nil
}

// varintsThen decodes n varints at the start of body and returns the
// bytes after them.
func varintsThen(body []byte, n int) ([]uint64, []byte, error) {
	out := make([]uint64, 0, n)
	for range n {
		v, m := protowire.ConsumeVarint(body)
		if m < 0 {
			return nil, nil, malformed("bad varint")
		}
		out = append(out, v)
		body = body[m:]
	}
	return out, body, nil
}

// varints decodes exactly n varints filling body.
func varints(body []byte, n int) ([]uint64, error) {
	out, rest, err := varintsThen(body, n)
	if err == nil && len(rest) != 0 {
		return nil, malformed("%d stray bytes in record", len(rest))
	}
	return out, err
}
