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
	Term    uint64       `json:"term,omitempty"`     // header raft_term of the serving node
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

// PorcupineOps turns register ops into Porcupine operations, patched as
// etcd's tests/robustness does (values are unique per write):
//   - failed reads are dropped;
//   - an indeterminate (info) write or cas whose value no completed op ever
//     observed (an ok read of it, or a successful cas expecting it), and
//     whose effect no failed cas could have observed either (no ok cas on
//     its key that failed and returned after the write was called), is
//     dropped: had it taken effect, it was overwritten unseen, so the
//     history with it is linearizable iff the history without it is;
//   - an observed indeterminate write gets an unknown output and returns when
//     its first observer returned (it must have taken effect by then);
//   - any other indeterminate write keeps an unknown output and Return =
//     +inf (math.MaxInt64), as unpatched: a failed cas observes only that
//     the value differs from what it expected, which such a write may be
//     the reason for (the etcd-client run of 2026-11-23 was reported
//     non-linearizable because the patch dropped such a write:
//     testdata/etcd-violation-20261123.jsonl, TestReplayEtcdViolation20261123).
func PorcupineOps(ops []RegisterOp) []porcupine.Operation {
	type kv struct{ key, value string }
	seen := map[kv]int64{} // first return time of an op that observed value
	observe := func(k kv, at int64) {
		if t, ok := seen[k]; !ok || at < t {
			seen[k] = at
		}
	}
	lastFailedCAS := map[string]int64{} // per key, last return of an ok cas that failed
	for _, op := range ops {
		if op.Status != StatusOK {
			continue
		}
		switch {
		case op.Kind == RegRead && op.Result != "":
			observe(kv{op.Key, op.Result}, op.Return)
		case op.Kind == RegCAS && op.OK:
			observe(kv{op.Key, op.Expect}, op.Return)
		case op.Kind == RegCAS:
			lastFailedCAS[op.Key] = max(lastFailedCAS[op.Key], op.Return)
		}
	}
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
			if at, observed := seen[kv{op.Key, op.Value}]; observed {
				o.Return = max(at, op.Call)
			} else if last, ok := lastFailedCAS[op.Key]; ok && last > op.Call {
				o.Return = math.MaxInt64
			} else {
				continue
			}
		}
		out = append(out, o)
	}
	return out
}

// unpatchedInfinite is the unpatched form: every indeterminate write open
// until +inf. It is kept for tests that check the patch is sound.
func unpatchedInfinite(ops []RegisterOp) []porcupine.Operation {
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
	// KeyLifetime: every KeyLifetime the clients move to fresh keys
	// (<prefix><generation>-<i>), as Jepsen's independent keys do, so that
	// each key's history stays small enough for Porcupine (default 5s).
	KeyLifetime time.Duration
	// Serializable makes reads serializable (served from the local FSM):
	// not linearizable under partitions, so a run with it is a canary that
	// shows the checker catching stale reads in a real cluster.
	Serializable bool
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
	if c.KeyLifetime == 0 {
		c.KeyLifetime = 5 * time.Second
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
	return runRegisterClients(ctx, cfg, h, func(r *rand.Rand) (string, registerDo) {
		name, nc := conns.Random(r)
		return name, func(ctx context.Context, op *RegisterOp) error {
			return doRegisterOp(ctx, nc.KV, op, cfg.Serializable)
		}
	})
}

// registerDo runs one register op against the node it was picked for,
// filling op's result fields.
type registerDo func(ctx context.Context, op *RegisterOp) error

// runRegisterClients is the register workload's client loop, whatever the
// client library: cfg.Clients clients, each op against the node pick
// returns, every op recorded in h; it returns the acknowledged puts.
func runRegisterClients(ctx context.Context, cfg RegisterConfig, h *History, pick func(*rand.Rand) (string, registerDo)) []AckedPut {
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
			// known is the last value this client saw per key, so that most
			// cas expect a value that may well be current and succeed.
			known := map[string]string{}
			for ctx.Err() == nil {
				name, do := pick(r)
				gen := h.Now() / int64(cfg.KeyLifetime)
				key := fmt.Sprintf("%s%d-%d", cfg.Prefix, gen, r.IntN(cfg.Keys))
				op := RegisterOp{Process: process, Client: client, Node: name, Key: key}
				switch p := r.IntN(10); {
				case p < 4:
					op.Kind = RegRead
				case p < 7:
					op.Kind = RegWrite
					op.Value = fmt.Sprintf("%d", nextVal.Add(1))
				default:
					op.Kind = RegCAS
					if v, ok := known[key]; ok && r.IntN(5) != 0 {
						op.Expect = v
					} else {
						op.Expect = fmt.Sprintf("%d", r.Int64N(max(nextVal.Load(), 1))+1)
					}
					op.Value = fmt.Sprintf("%d", nextVal.Add(1))
				}
				octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
				op.Call = h.Now()
				err := do(octx, &op)
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
					switch {
					case op.Kind == RegRead && op.Result != "":
						known[key] = op.Result
					case op.Kind == RegWrite || (op.Kind == RegCAS && op.OK):
						known[key] = op.Value
					}
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

func doRegisterOp(ctx context.Context, kv pb.KVClient, op *RegisterOp, serializable bool) error {
	key := []byte(op.Key)
	switch op.Kind {
	case RegRead:
		resp, err := kv.Range(ctx, &pb.RangeRequest{Key: key, Serializable: serializable})
		if err != nil {
			return err
		}
		op.Rev, op.Term = resp.GetHeader().GetRevision(), resp.GetHeader().GetRaftTerm()
		if len(resp.Kvs) > 0 {
			op.Result = string(resp.Kvs[0].Value)
		}
	case RegWrite:
		resp, err := kv.Put(ctx, &pb.PutRequest{Key: key, Value: []byte(op.Value)})
		if err != nil {
			return err
		}
		op.Rev, op.Term = resp.GetHeader().GetRevision(), resp.GetHeader().GetRaftTerm()
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
		op.Rev, op.Term = resp.GetHeader().GetRevision(), resp.GetHeader().GetRaftTerm()
		op.OK = resp.Succeeded
	}
	return nil
}
