package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// LeaseRecord is one event of the lease workload. Times are ns since the
// run's start.
type LeaseRecord struct {
	Kind   string   `json:"kind"`  // "grant", "keepalive", "put", "read", "stop"
	Role   string   `json:"role"`  // "keeper" or "expirer"
	Lease  int64    `json:"lease"` // lease id
	TTL    int64    `json:"ttl"`   // seconds granted / remaining (grant, keepalive)
	Key    string   `json:"key,omitempty"`
	Keys   []string `json:"keys,omitempty"` // read: keys present under the role's prefix
	Status Status   `json:"status"`
	Call   int64    `json:"call"`
	Return int64    `json:"return"`
	Err    string   `json:"err,omitempty"`
	Term   uint64   `json:"term,omitempty"` // header raft_term of the serving node
}

// LeaseConfig shapes the lease workload.
type LeaseConfig struct {
	Prefix     string        // default "/jepsen/lease/"
	TTL        int64         // seconds (default 4)
	KeysPerRun int           // keys written under each lease (default 3)
	Hold       time.Duration // how long the expirer keeps a lease alive before letting it go (default 3s)
	OpTimeout  time.Duration // default 1s
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Prefix == "" {
		c.Prefix = "/jepsen/lease/"
	}
	if c.TTL == 0 {
		c.TTL = 4
	}
	if c.KeysPerRun == 0 {
		c.KeysPerRun = 3
	}
	if c.Hold == 0 {
		c.Hold = 3 * time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = time.Second
	}
	return c
}

type leaseClient struct {
	cfg   LeaseConfig
	conns Conns
	h     *History
	role  string
	r     *rand.Rand

	mu   sync.Mutex
	recs []LeaseRecord
}

func (lc *leaseClient) add(rec LeaseRecord) {
	rec.Role = lc.role
	lc.mu.Lock()
	lc.recs = append(lc.recs, rec)
	lc.mu.Unlock()
	lc.h.Add(Record{Type: "lease", At: rec.Call, Lease: &rec})
}

func (lc *leaseClient) prefix() string { return lc.cfg.Prefix + lc.role + "/" }

func (lc *leaseClient) grant(ctx context.Context) (int64, bool) {
	_, nc := lc.conns.Random(lc.r)
	octx, cancel := context.WithTimeout(ctx, lc.cfg.OpTimeout)
	defer cancel()
	rec := LeaseRecord{Kind: "grant", Call: lc.h.Now()}
	resp, err := nc.Lease.LeaseGrant(octx, &pb.LeaseGrantRequest{Ttl: lc.cfg.TTL})
	rec.Return = lc.h.Now()
	if err != nil {
		rec.Status, rec.Err = StatusInfo, err.Error()
		lc.add(rec)
		return 0, false
	}
	rec.Status, rec.Lease, rec.TTL, rec.Term = StatusOK, resp.Id, resp.Ttl, resp.GetHeader().GetRaftTerm()
	lc.add(rec)
	return resp.Id, true
}

// keepalive sends one keepalive over a fresh stream to a random node (the
// node forwards to the leader). It reports whether the lease is still alive.
func (lc *leaseClient) keepalive(ctx context.Context, id int64) (alive bool) {
	_, nc := lc.conns.Random(lc.r)
	octx, cancel := context.WithTimeout(ctx, lc.cfg.OpTimeout)
	defer cancel()
	rec := LeaseRecord{Kind: "keepalive", Lease: id, Call: lc.h.Now()}
	defer func() { rec.Return = lc.h.Now(); lc.add(rec) }()
	st, err := nc.Lease.LeaseKeepAlive(octx)
	if err == nil {
		err = st.Send(&pb.LeaseKeepAliveRequest{Id: id})
	}
	var resp *pb.LeaseKeepAliveResponse
	if err == nil {
		resp, err = st.Recv()
	}
	if err != nil {
		rec.Status, rec.Err = StatusFail, err.Error()
		// NotFound: the lease is gone (expired while keepalives failed);
		// anything else is unknown: keep trying.
		return status.Code(err) != codes.NotFound
	}
	_ = st.CloseSend()
	rec.Status, rec.TTL, rec.Term = StatusOK, resp.Ttl, resp.GetHeader().GetRaftTerm()
	return resp.Ttl > 0
}

func (lc *leaseClient) put(ctx context.Context, id int64, key string) bool {
	_, nc := lc.conns.Random(lc.r)
	octx, cancel := context.WithTimeout(ctx, lc.cfg.OpTimeout)
	defer cancel()
	rec := LeaseRecord{Kind: "put", Lease: id, Key: key, Call: lc.h.Now()}
	resp, err := nc.KV.Put(octx, &pb.PutRequest{Key: []byte(key), Value: []byte("x"), Lease: id})
	rec.Return = lc.h.Now()
	if err != nil {
		rec.Status, rec.Err = StatusInfo, err.Error()
	} else {
		rec.Status, rec.Term = StatusOK, resp.GetHeader().GetRaftTerm()
	}
	lc.add(rec)
	return err == nil
}

func (lc *leaseClient) read(ctx context.Context) {
	_, nc := lc.conns.Random(lc.r)
	octx, cancel := context.WithTimeout(ctx, lc.cfg.OpTimeout)
	defer cancel()
	p := lc.prefix()
	rec := LeaseRecord{Kind: "read", Call: lc.h.Now()}
	resp, err := nc.KV.Range(octx, &pb.RangeRequest{Key: []byte(p), RangeEnd: prefixEnd(p), KeysOnly: true})
	rec.Return = lc.h.Now()
	if err != nil {
		rec.Status, rec.Err = StatusFail, err.Error()
	} else {
		rec.Status, rec.Term = StatusOK, resp.GetHeader().GetRaftTerm()
		rec.Keys = []string{}
		for _, kv := range resp.Kvs {
			rec.Keys = append(rec.Keys, string(kv.Key))
		}
	}
	lc.add(rec)
}

// RunLeases runs two lease clients until ctx ends and returns their records.
// The keeper grants a lease, writes keys under it and keeps it alive every
// TTL/4, reading its keys every 250ms; if the lease is lost it grants a new
// one. The expirer repeatedly grants a lease, writes keys, keeps it alive
// for cfg.Hold, stops keeping it alive ("stop" record) and reads until the
// keys vanish.
func RunLeases(ctx context.Context, cfg LeaseConfig, conns Conns, h *History) []LeaseRecord {
	cfg = cfg.withDefaults()
	keeper := &leaseClient{cfg: cfg, conns: conns, h: h, role: "keeper", r: rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))}
	expirer := &leaseClient{cfg: cfg, conns: conns, h: h, role: "expirer", r: rand.New(rand.NewPCG(8, uint64(time.Now().UnixNano())))}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); keeper.runKeeper(ctx) }()
	go func() { defer wg.Done(); expirer.runExpirer(ctx) }()
	wg.Wait()
	return append(keeper.recs, expirer.recs...)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (lc *leaseClient) runKeeper(ctx context.Context) {
	interval := time.Duration(lc.cfg.TTL) * time.Second / 4
	for ctx.Err() == nil {
		id, ok := lc.grant(ctx)
		if !ok {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		for i := 0; i < lc.cfg.KeysPerRun && ctx.Err() == nil; i++ {
			lc.put(ctx, id, fmt.Sprintf("%s%x/%d", lc.prefix(), id, i))
		}
		lastKA := time.Now()
		for ctx.Err() == nil {
			if time.Since(lastKA) >= interval {
				lastKA = time.Now()
				if !lc.keepalive(ctx, id) {
					break // lease gone: grant a new one
				}
			}
			lc.read(ctx)
			sleepCtx(ctx, 250*time.Millisecond)
		}
	}
}

func (lc *leaseClient) runExpirer(ctx context.Context) {
	interval := time.Duration(lc.cfg.TTL) * time.Second / 4
	for ctx.Err() == nil {
		id, ok := lc.grant(ctx)
		if !ok {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		for i := 0; i < lc.cfg.KeysPerRun && ctx.Err() == nil; i++ {
			lc.put(ctx, id, fmt.Sprintf("%s%x/%d", lc.prefix(), id, i))
		}
		hold := time.Now().Add(lc.cfg.Hold)
		for time.Now().Before(hold) && ctx.Err() == nil {
			lc.keepalive(ctx, id)
			sleepCtx(ctx, interval)
		}
		if ctx.Err() != nil {
			return
		}
		lc.add(LeaseRecord{Kind: "stop", Lease: id, Status: StatusOK, Call: lc.h.Now(), Return: lc.h.Now()})
		// Read until the lease's keys are gone (bounded: TTL + 15 s).
		until := time.Now().Add(time.Duration(lc.cfg.TTL)*time.Second + 15*time.Second)
		leasePrefix := fmt.Sprintf("%s%x/", lc.prefix(), id)
		for time.Now().Before(until) && ctx.Err() == nil {
			lc.read(ctx)
			lc.mu.Lock()
			last := lc.recs[len(lc.recs)-1]
			lc.mu.Unlock()
			if last.Status == StatusOK && !anyHasPrefix(last.Keys, leasePrefix) {
				break
			}
			sleepCtx(ctx, 250*time.Millisecond)
		}
	}
}

func anyHasPrefix(keys []string, p string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
