package integration

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// holdIdle keeps n TCP connections from src to addr open that never send
// a byte: when the server closes one, it dials again (after 50 ms), until
// ctx ends; wg counts its goroutines.
func holdIdle(ctx context.Context, wg *sync.WaitGroup, src net.IP, addr string, n int) {
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: time.Second}
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					stop := context.AfterFunc(ctx, func() { c.Close() })
					_, _ = c.Read(make([]byte, 1)) // until the server closes it (or ctx ends)
					stop()
					c.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	}
}

// TestIdleRaftConnectionsDoNotStallElections is issue 32's hole 2: with
// 16 idle connections held to every node's Raft port (from another
// loopback address, re-dialled whenever the node closes one), the leader
// is killed, and a write still gets through the survivors within 10 s.
// Before the fix the Raft port ran one TLS handshake at a time inside
// Accept, 10 s each, and no vote reached a survivor while the connections
// were held.
func TestIdleRaftConnectionsDoNotStallElections(t *testing.T) {
	sc := newSecureCluster(t, 3)
	leader := mustLeader(t, sc.Cluster, 60*time.Second)
	cl := sc.client(t, sc.admin)
	put := func(key string) {
		t.Helper()
		waitFor(t, 30*time.Second, "a put", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("1")})
			return err == nil
		})
	}
	put("/sec/before")
	// Restart each follower, one at a time, under the same leader: the
	// survivors then hold no pooled Raft connection to each other (one
	// from an earlier election would carry the votes), and a candidate
	// must dial a Raft port as the idle connections do.
	for _, p := range sc.Procs {
		if p == leader {
			continue
		}
		sc.Kill(p)
		sc.Start(p)
		put("/sec/restarted-" + p.ID)
	}
	if l := mustLeader(t, sc.Cluster, 30*time.Second); l != leader {
		t.Logf("leadership moved to %s while the followers restarted", l.ID)
		leader = l
	}

	hold, stopHold := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stopHold(); wg.Wait() }()
	for _, p := range sc.Procs {
		holdIdle(hold, &wg, net.IPv4(127, 0, 0, 2), p.Raft, 16)
	}
	time.Sleep(time.Second) // the connections are in (and queued on the old code)

	sc.Kill(leader)
	killed := time.Now()
	var survivors []*Proc
	for _, p := range sc.Procs {
		if p != leader {
			survivors = append(survivors, p)
		}
	}
	scl := sc.client(t, sc.admin, survivors...)
	const within = 10 * time.Second
	var lastErr error
	for i := 0; time.Since(killed) < within; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := scl.KV.Put(ctx, &pb.PutRequest{Key: []byte("/sec/after"), Value: []byte(fmt.Sprint(i))})
		cancel()
		if err == nil {
			t.Logf("a write got through %v after the leader was killed, with 16 idle connections held to each Raft port",
				time.Since(killed).Round(10*time.Millisecond))
			return
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no write got through within %v of killing the leader while idle connections were held to the Raft ports; last error: %v",
		within, lastErr)
}
