package fsm_test

import (
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// Example applies one log entry holding a lease grant and a put under that
// lease, as raft would after commit, then reads the key back.
func Example() {
	f := fsm.New(nil)

	grant, _ := fsm.NewCommand(pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: 10})
	put, _ := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("/nodes/n1"), Value: []byte("server,pserver"), Lease: 1})
	bad, _ := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("/x"), Lease: 42})
	data, _ := fsm.EncodeEntry(1_700_000_000_000_000_000, []*pb.Command{grant, put, bad})

	res := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}).(*fsm.ApplyResult)
	var g pb.LeaseGrantResponse
	_ = proto.Unmarshal(res.Results[0].Payload, &g)
	fmt.Println("lease", g.Id, "ttl", g.Ttl)
	fmt.Println("put at revision", res.Results[1].Revision)
	fmt.Println("rejected:", fsm.ResultError(res.Results[2]))

	r, _ := f.Range(&pb.RangeRequest{Key: []byte("/nodes/"), RangeEnd: []byte("/nodes0")})
	for _, kv := range r.Kvs {
		fmt.Printf("%s=%s create=%d mod=%d version=%d lease=%d\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	// Output:
	// lease 1 ttl 10
	// put at revision 2
	// rejected: fsm: lease not found: put: lease 42
	// /nodes/n1=server,pserver create=2 mod=2 version=1 lease=1
}
