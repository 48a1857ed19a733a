package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// retryPut puts until it succeeds (a put during an election may fail; its
// outcome is then unknown, so a retry may write the key twice, which the
// watch checks below account for by comparing with the store's history).
func retryPut(ctx context.Context, t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := cli.Put(pctx, k, v)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("put %s: %v (last error %v)", k, ctx.Err(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type evRec struct {
	typ      mvccpb.Event_EventType
	key, val string
	rev      int64
}

// collect reads events of wch until one has key last (or ctx ends).
func collect(ctx context.Context, t *testing.T, wch clientv3.WatchChan, last string) []evRec {
	t.Helper()
	var out []evRec
	for {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("watch channel closed after %d events", len(out))
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			for _, ev := range wr.Events {
				out = append(out, evRec{ev.Type, string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.ModRevision})
				if string(ev.Kv.Key) == last {
					return out
				}
			}
		case <-ctx.Done():
			t.Fatalf("watch: %v after %d events", ctx.Err(), len(out))
		}
	}
}

// TestEtcdClientKVTxnWatchResume: etcd's Go client against 3 raftps
// nodes: KV and Txn; then a watch served by the leader, which is
// SIGKILLed in the middle of 60 writes, resumes on a survivor and
// delivers exactly the store's history: no gap, no duplicate.
func TestEtcdClientKVTxnWatchResume(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cli := etcdClient(t, grpcEndpoints(c), c.Admin())

	if _, err := cli.Put(ctx, "/kv/a", "1"); err != nil {
		t.Fatal(err)
	}
	g, err := cli.Get(ctx, "/kv/a")
	if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "1" || g.Kvs[0].Version != 1 {
		t.Fatalf("get: %v %v", g, err)
	}
	tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("/kv/a"), "=", g.Kvs[0].ModRevision)).
		Then(clientv3.OpPut("/kv/a", "2"), clientv3.OpGet("/kv/a")).Else(clientv3.OpGet("/kv/a")).Commit()
	if err != nil || !tr.Succeeded || string(tr.Responses[1].GetResponseRange().Kvs[0].Value) != "2" {
		t.Fatalf("txn: %v %v", tr, err)
	}
	tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("/kv/a"), "=", g.Kvs[0].ModRevision)).
		Then(clientv3.OpPut("/kv/a", "3")).Commit()
	if err != nil || tr.Succeeded {
		t.Fatalf("stale txn: %v %v", tr, err)
	}

	// The watch stream goes to the leader (its client knows no other
	// endpoint until the stream is up).
	wcli := etcdClient(t, []string{leader.GRPC}, c.Admin())
	start, err := wcli.Put(ctx, "/wr/start", "")
	if err != nil {
		t.Fatal(err)
	}
	wch := wcli.Watch(ctx, "/wr/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision))
	if ev := collect(ctx, t, wch, "/wr/start"); len(ev) != 1 {
		t.Fatalf("first events: %v", ev)
	}
	wcli.SetEndpoints(grpcEndpoints(c)...)

	const writes, killAt = 60, 20
	var survivors []string
	for i := range writes {
		if i == killAt {
			c.Kill(leader)
			survivors = grpcEndpoints(c)
			t.Logf("SIGKILLed the leader %s after %d writes", leader.ID, i)
		}
		retryPut(ctx, t, cli, fmt.Sprintf("/wr/%02d", i), fmt.Sprint(i))
	}
	last := fmt.Sprintf("/wr/%02d", writes-1)
	got := collect(ctx, t, wch, last)

	// The store's own history of the same range, from a survivor.
	hcli := etcdClient(t, survivors, c.Admin())
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	want := collect(ctx, t, hcli.Watch(hctx, "/wr/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1)), last)
	if len(got) != len(want) {
		t.Fatalf("resumed watch saw %d events, the history has %d:\n%v\n%v", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d: resumed watch %v, history %v", i, got[i], want[i])
		}
	}
	t.Logf("watch resumed across the leader kill: %d events, revisions %d..%d, none missing or repeated",
		len(got), got[0].rev, got[len(got)-1].rev)
}

// TestEtcdConcurrencyMutexLeaderKill: etcd's concurrency.Mutex under
// contention from 8 goroutines, each with its own client on the 3
// endpoints and its own Session; the raftps leader is SIGKILLed after 8
// acquisitions. Every goroutine acquires 4 times; never are two holders
// inside at once, and every holder's fenced write (a Txn that compares
// its ownership, etcd's pattern) succeeds.
func TestEtcdConcurrencyMutexLeaderKill(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	eps := grpcEndpoints(c)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	const workers, rounds, killAfter = 8, 4, 8
	var holders, overlaps, acquired, lockErrs atomic.Int64
	var killOnce sync.Once
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		cli := etcdClient(t, eps, c.Admin())
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := concurrency.NewMutex(sess, "/lock/")
			for r := 0; r < rounds; {
				lctx, lcancel := context.WithTimeout(ctx, 15*time.Second)
				err := m.Lock(lctx)
				lcancel()
				if err != nil {
					if ctx.Err() != nil {
						errc <- fmt.Errorf("worker %d round %d: lock: %w", w, r, err)
						return
					}
					lockErrs.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				fenced, err := fencedWrite(ctx, cli, m, fmt.Sprintf("w%d-r%d", w, r))
				time.Sleep(5 * time.Millisecond)
				holders.Add(-1)
				if err != nil || !fenced {
					errc <- fmt.Errorf("worker %d round %d: fenced write as holder: succeeded=%v err=%v", w, r, fenced, err)
					return
				}
				if acquired.Add(1) == killAfter {
					killOnce.Do(func() {
						c.Kill(leader)
						t.Logf("SIGKILLed the leader %s after %d acquisitions", leader.ID, killAfter)
					})
				}
				for {
					uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
					err := m.Unlock(uctx)
					ucancel()
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						errc <- fmt.Errorf("worker %d round %d: unlock: %w", w, r, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				r++
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d acquisitions overlapped another holder", overlaps.Load())
	}
	if acquired.Load() != workers*rounds {
		t.Fatalf("%d acquisitions, want %d", acquired.Load(), workers*rounds)
	}
	t.Logf("mutex: %d acquisitions by %d goroutines on 3 endpoints across a leader kill, no overlap, %d lock calls retried",
		acquired.Load(), workers, lockErrs.Load())
}

// fencedWrite writes as the holder of m: a Txn that succeeds only while
// m's key is still the owner key (etcd's Mutex.IsOwner). A write whose
// outcome is unknown (an election) is retried; its compare makes a
// repeat harmless.
func fencedWrite(ctx context.Context, cli *clientv3.Client, m *concurrency.Mutex, v string) (bool, error) {
	for {
		tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := cli.Txn(tctx).If(m.IsOwner()).Then(clientv3.OpPut("/lock-holder", v)).Commit()
		cancel()
		if err == nil {
			return resp.Succeeded, nil
		}
		if ctx.Err() != nil {
			return false, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEtcdConcurrencyElectionLeaderKill: etcd's concurrency.Election with
// 3 candidates (own client and Session each) campaigning twice each, an
// observer on a fourth client, and the raftps leader SIGKILLed while the
// third term is held. One leader at a time; every campaign wins in turn;
// the observer sees every candidate lead.
func TestEtcdConcurrencyElectionLeaderKill(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	eps := grpcEndpoints(c)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	ocli := etcdClient(t, eps, c.Admin())
	osess, err := concurrency.NewSession(ocli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer osess.Close()
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	observed := map[string]bool{}
	var omu sync.Mutex
	obs := concurrency.NewElection(osess, "/elect/").Observe(octx)
	odone := make(chan struct{})
	go func() {
		defer close(odone)
		for resp := range obs {
			if len(resp.Kvs) > 0 {
				omu.Lock()
				observed[string(resp.Kvs[0].Value)] = true
				omu.Unlock()
			}
		}
	}()

	const candidates, terms, killAtTerm = 3, 2, 3
	var inOffice, overlaps, termsHeld atomic.Int64
	var killOnce sync.Once
	var wg sync.WaitGroup
	errc := make(chan error, candidates)
	for i := range candidates {
		name := fmt.Sprintf("c%d", i)
		cli := etcdClient(t, eps, c.Admin())
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := concurrency.NewElection(sess, "/elect/")
			for term := 0; term < terms; {
				cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
				err := e.Campaign(cctx, name)
				ccancel()
				if err != nil {
					if ctx.Err() != nil {
						errc <- fmt.Errorf("%s: campaign: %w", name, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if inOffice.Add(1) != 1 {
					overlaps.Add(1)
				}
				held := termsHeld.Add(1)
				if held == killAtTerm {
					killOnce.Do(func() {
						c.Kill(leader)
						t.Logf("SIGKILLed the raftps leader %s during election term %d (held by %s)", leader.ID, held, name)
					})
				}
				if err := checkLeader(ctx, e, name); err != nil {
					errc <- fmt.Errorf("%s: %w", name, err)
					inOffice.Add(-1)
					return
				}
				time.Sleep(100 * time.Millisecond)
				inOffice.Add(-1)
				for {
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					err := e.Resign(rctx)
					rcancel()
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						errc <- fmt.Errorf("%s: resign: %w", name, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				term++
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d terms overlapped another leader", overlaps.Load())
	}
	if termsHeld.Load() != candidates*terms {
		t.Fatalf("%d terms held, want %d", termsHeld.Load(), candidates*terms)
	}
	waitFor(t, 10*time.Second, "the observer to see every candidate lead", func() bool {
		omu.Lock()
		defer omu.Unlock()
		return len(observed) == candidates
	})
	ocancel()
	<-odone
	t.Logf("election: %d terms by %d candidates across a leader kill, one leader at a time, observer saw %d leaders",
		termsHeld.Load(), candidates, len(observed))
}

// checkLeader asks the election who leads (a linearizable read, retried
// through an election) and wants name.
func checkLeader(ctx context.Context, e *concurrency.Election, name string) error {
	for {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := e.Leader(lctx)
		cancel()
		if err == nil {
			if got := string(resp.Kvs[0].Value); got != name {
				return fmt.Errorf("elected, but the election says %q leads", got)
			}
			return nil
		}
		if errors.Is(err, concurrency.ErrElectionNoLeader) || ctx.Err() != nil {
			return fmt.Errorf("leader: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
