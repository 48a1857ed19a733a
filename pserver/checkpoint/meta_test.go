package checkpoint

import (
	"context"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/storetest"
)

// testMeta is the metadata store of these tests: raftstore/storetest (the
// real state machine without Raft; Fail("Txn"/"Range", err) cuts it off)
// with the two helpers the tests write keys with.
type testMeta struct{ *storetest.Store }

var _ Meta = testMeta{}

func newTestMeta() testMeta { return testMeta{storetest.New()} }

// put writes key and returns the revision of the write. It panics if the
// store refuses (a key or value over the state machine's limits: a broken
// test).
func (m testMeta) put(key string, val []byte) int64 {
	resp, err := m.Put(context.Background(), &pb.PutRequest{Key: []byte(key), Value: val})
	if err != nil {
		panic(fmt.Sprintf("testMeta: put %q: %v", key, err))
	}
	return resp.GetHeader().GetRevision()
}

// del deletes key.
func (m testMeta) del(key string) {
	if _, err := m.DeleteRange(context.Background(), &pb.DeleteRangeRequest{Key: []byte(key)}); err != nil {
		panic(fmt.Sprintf("testMeta: delete %q: %v", key, err))
	}
}
