package jepsen

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// RegisterKind is the kind of a register operation.
type RegisterKind string

const (
	RegRead  RegisterKind = "read"
	RegWrite RegisterKind = "write"
	RegCAS   RegisterKind = "cas"
)

// RegisterOp is one get, put or compare-and-swap on one key, as a client saw
// it. Call and Return are ns since the run's start; an indeterminate write
// (Status info) has Return = math.MaxInt64 once normalised by the checker.
type RegisterOp struct {
	Process int          `json:"process"` // a client gets a new process after an indeterminate op
	Client  int          `json:"client"`
	Node    string       `json:"node"` // node the client talked to
	Kind    RegisterKind `json:"kind"`
	Key     string       `json:"key"`
	Value   string       `json:"value,omitempty"`  // written value (write, cas new value)
	Expect  string       `json:"expect,omitempty"` // cas: expected current value
	Result  string       `json:"result,omitempty"` // read: value read ("" = key absent)
	OK      bool         `json:"cas_ok,omitempty"` // cas: the compare held and the put applied
	Status  Status       `json:"status"`
	Call    int64        `json:"call"`
	Return  int64        `json:"return"`
	Rev     int64        `json:"revision,omitempty"` // header revision of the response
	Err     string       `json:"err,omitempty"`
}

type regInput struct {
	Kind   RegisterKind
	Value  string
	Expect string
}

type regOutput struct {
	Result  string
	OK      bool
	Unknown bool
}

// RegisterModel is the Porcupine model of a set of independent registers
// (one per key, partitioned by key). The state of a partition is the key's
// value, "" for absent. An indeterminate write always steps; an
// indeterminate cas applies iff the compare holds (if it never took effect it
// linearizes after every completed op, where it cannot be observed).
var RegisterModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Metadata.(RegisterOp).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s := state.(string)
		in, out := input.(regInput), output.(regOutput)
		switch in.Kind {
		case RegRead:
			return out.Unknown || out.Result == s, s
		case RegWrite:
			return true, in.Value
		case RegCAS:
			if out.Unknown {
				if s == in.Expect {
					return true, in.Value
				}
				return true, s
			}
			if out.OK {
				return s == in.Expect, in.Value
			}
			return s != in.Expect, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		res := ""
		switch {
		case out.Unknown:
			res = " -> ?"
		case in.Kind == RegRead:
			res = fmt.Sprintf(" -> %q", out.Result)
		case in.Kind == RegCAS:
			res = fmt.Sprintf(" -> %v", out.OK)
		}
		switch in.Kind {
		case RegRead:
			return "get" + res
		case RegWrite:
			return fmt.Sprintf("put(%q)%s", in.Value, res)
		default:
			return fmt.Sprintf("cas(%q→%q)%s", in.Expect, in.Value, res)
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state.(string)) },
	DescribeOperationMetadata: func(info any) string {
		op := info.(RegisterOp)
		return fmt.Sprintf("key=%s node=%s status=%s rev=%d %s", op.Key, op.Node, op.Status, op.Rev, op.Err)
	},
}

// PorcupineOps turns register ops into Porcupine operations: failed reads are
// dropped, indeterminate (info) writes and cas get Return = +inf and an
// unknown output, failed writes that are known not to have happened are
// dropped too.
func PorcupineOps(ops []RegisterOp) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		in := regInput{Kind: op.Kind, Value: op.Value, Expect: op.Expect}
		o := porcupine.Operation{ClientId: op.Process, Input: in, Call: op.Call, Return: op.Return, Metadata: op}
		switch op.Status {
		case StatusOK:
			o.Output = regOutput{Result: op.Result, OK: op.OK}
		case StatusFail:
			continue
		case StatusInfo:
			if op.Kind == RegRead {
				continue
			}
			o.Output = regOutput{Unknown: true}
			o.Return = math.MaxInt64
		}
		out = append(out, o)
	}
	return out
}

// RegisterConfig shapes the register workload.
type RegisterConfig struct {
	Clients   int           // concurrent clients (default 5)
	Keys      int           // number of registers (default 3)
	Prefix    string        // key prefix (default "/jepsen/reg/")
	OpTimeout time.Duration // per-op timeout (default 1s)
	Pause     time.Duration // think time between ops of a client (default 20ms)
}

func (c RegisterConfig) withDefaults() RegisterConfig {
	if c.Clients == 0 {
		c.Clients = 5
	}
	if c.Keys == 0 {
		c.Keys = 3
	}
	if c.Prefix == "" {
		c.Prefix = "/jepsen/reg/"
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = time.Second
	}
	if c.Pause == 0 {
		c.Pause = 20 * time.Millisecond
	}
	return c
}

// AckedPut is a put acknowledged to a client with the revision it got.
type AckedPut struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Revision int64  `json:"revision"`
}

// Conns gives a workload a KV client for a random node, and the node's name.
type Conns interface {
	Random(r *rand.Rand) (name string, c *NodeConn)
	All() []*NodeConn
}

// RunRegisters runs cfg.Clients clients doing get/put/cas on cfg.Keys keys
// until ctx ends, recording every op in h. Each client picks a random node
// for every op. It returns the puts acknowledged with their revisions.
func RunRegisters(ctx context.Context, cfg RegisterConfig, conns Conns, h *History) []AckedPut {
	cfg = cfg.withDefaults()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		acked   []AckedPut
		nextPID atomic.Int64
		nextVal atomic.Int64
	)
	nextPID.Store(int64(cfg.Clients))
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func(client int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
			process := client
			for ctx.Err() == nil {
				name, nc := conns.Random(r)
				key := fmt.Sprintf("%s%d", cfg.Prefix, r.IntN(cfg.Keys))
				op := RegisterOp{Process: process, Client: client, Node: name, Key: key}
				switch p := r.IntN(10); {
				case p < 4:
					op.Kind = RegRead
				case p < 7:
					op.Kind = RegWrite
					op.Value = fmt.Sprintf("%d", nextVal.Add(1))
				default:
					op.Kind = RegCAS
					op.Expect = fmt.Sprintf("%d", r.Int64N(max(nextVal.Load(), 1))+1)
					op.Value = fmt.Sprintf("%d", nextVal.Add(1))
				}
				octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
				op.Call = h.Now()
				err := doRegisterOp(octx, nc.KV, &op)
				op.Return = h.Now()
				cancel()
				if err != nil {
					op.Err = err.Error()
					if op.Kind == RegRead {
						op.Status = StatusFail
					} else {
						op.Status = StatusInfo
						process = int(nextPID.Add(1)) // Jepsen: a crashed process never comes back
					}
				} else {
					op.Status = StatusOK
					if op.Kind == RegWrite || (op.Kind == RegCAS && op.OK) {
						mu.Lock()
						acked = append(acked, AckedPut{Key: op.Key, Value: op.Value, Revision: op.Rev})
						mu.Unlock()
					}
				}
				h.Add(Record{Type: "register", At: op.Call, Register: &op})
				select {
				case <-ctx.Done():
				case <-time.After(cfg.Pause):
				}
			}
		}(c)
	}
	wg.Wait()
	return acked
}

func doRegisterOp(ctx context.Context, kv pb.KVClient, op *RegisterOp) error {
	key := []byte(op.Key)
	switch op.Kind {
	case RegRead:
		resp, err := kv.Range(ctx, &pb.RangeRequest{Key: key})
		if err != nil {
			return err
		}
		op.Rev = resp.GetHeader().GetRevision()
		if len(resp.Kvs) > 0 {
			op.Result = string(resp.Kvs[0].Value)
		}
	case RegWrite:
		resp, err := kv.Put(ctx, &pb.PutRequest{Key: key, Value: []byte(op.Value)})
		if err != nil {
			return err
		}
		op.Rev = resp.GetHeader().GetRevision()
	case RegCAS:
		resp, err := kv.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{
				Result: pb.Compare_EQUAL, Target: pb.Compare_VALUE, Key: key,
				TargetUnion: &pb.Compare_Value{Value: []byte(op.Expect)},
			}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: key, Value: []byte(op.Value)}}}},
		})
		if err != nil {
			return err
		}
		op.Rev = resp.GetHeader().GetRevision()
		op.OK = resp.Succeeded
	}
	return nil
}
