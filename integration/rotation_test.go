package integration

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/security"
)

// load writes through an admin client until stopped (at most 3 minutes)
// and counts failed writes; a monitor polls the members and records any
// that is not alive.
type load struct {
	stop           chan struct{}
	wg             sync.WaitGroup
	writes, failed atomic.Int64
	mu             sync.Mutex
	errs           []string
	notAlive       []string
}

func startLoad(t *testing.T, sc *secureCluster) *load {
	l := &load{stop: make(chan struct{})}
	cl := sc.client(t, sc.admin)
	deadline := time.Now().Add(3 * time.Minute)
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		for i := 0; time.Now().Before(deadline); i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			// Through client.Retry, as a user writes across a leader
			// change (CI machines are loaded: an election may happen
			// during the rotation, and its ErrLeadershipLost is retried
			// exactly once); a rotation that broke Raft still fails the
			// write at the deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := client.Retry(ctx, func(ctx context.Context) error {
				_, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("/load/%d", i%100)), Value: []byte(fmt.Sprint(i))})
				return err
			})
			cancel()
			l.writes.Add(1)
			if err != nil {
				l.failed.Add(1)
				l.mu.Lock()
				l.errs = append(l.errs, err.Error())
				l.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	go func() {
		defer l.wg.Done()
		for time.Now().Before(deadline) {
			select {
			case <-l.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
			cancel()
			if err != nil {
				continue
			}
			for _, m := range r.Members {
				if m.Status != "alive" {
					l.mu.Lock()
					l.notAlive = append(l.notAlive, m.Id+" "+m.Status)
					l.mu.Unlock()
				}
			}
		}
	}()
	return l
}

func (l *load) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	t.Logf("load: %d writes, %d failed", l.writes.Load(), l.failed.Load())
	if l.failed.Load() > 0 || l.writes.Load() == 0 {
		t.Errorf("%d of %d writes failed: %v", l.failed.Load(), l.writes.Load(), l.errs)
	}
	if len(l.notAlive) > 0 {
		t.Errorf("members not alive during the rotation: %v", l.notAlive)
	}
}

func newKey(t *testing.T) []byte {
	t.Helper()
	s, err := security.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := security.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keyringOf runs `keyring list -o json` and returns each node's primary
// and keys.
func keyringOf(t *testing.T, sc *secureCluster) map[string]string {
	t.Helper()
	out, errOut, err := sc.cli(sc.admin, "keyring", "list")
	if err != nil {
		t.Fatalf("keyring list: %v %s %s", err, out, errOut)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	return got
}

func wantKeyring(t *testing.T, sc *secureCluster, primary []byte, keys ...[]byte) {
	t.Helper()
	var fps []string
	for _, k := range keys {
		fps = append(fps, security.Fingerprint(k))
	}
	got := keyringOf(t, sc)
	if len(got) != len(sc.Procs) {
		t.Fatalf("keyring list shows %d nodes, want %d: %v", len(got), len(sc.Procs), got)
	}
	for node, v := range got {
		f := strings.Fields(v)
		have := strings.Split(f[1], ",")
		if f[0] != security.Fingerprint(primary) || len(have) != len(fps) {
			t.Fatalf("%s: %s; want primary %s and keys %v", node, v, security.Fingerprint(primary), fps)
		}
		for _, fp := range fps {
			if !strings.Contains(f[1], fp) {
				t.Fatalf("%s: keys %s lack %s", node, f[1], fp)
			}
		}
	}
}

// TestRotationUnderLoad: with writes going on, the gossip key is rotated
// on the live cluster (install, use, remove) and every node's certificate
// (and the client's) is replaced on disk; no write fails, no member is
// ever seen other than alive, every keyring file ends with the new key
// only, and the nodes serve their new certificates without a restart.
// Then a node without the key cannot join and sees no one.
func TestRotationUnderLoad(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	sc := newSecureClusterKeyring(t, 3, [][]byte{k1})
	l := startLoad(t, sc)
	time.Sleep(time.Second)

	// Gossip key: install, use, remove.
	keyFile := filepath.Join(t.TempDir(), "new.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(k2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"keyring", "install", "--key-file", keyFile},
		{"keyring", "use", security.Fingerprint(k2)},
	} {
		if out, errOut, err := sc.cli(sc.admin, args...); err != nil {
			t.Fatalf("%v: %v %s %s", args, err, out, errOut)
		}
	}
	wantKeyring(t, sc, k2, k1, k2)
	// The primary cannot be removed.
	if _, errOut, err := sc.cli(sc.admin, "keyring", "remove", security.Fingerprint(k2)); err == nil || !strings.Contains(errOut, "primary") {
		t.Fatalf("removing the primary: %v %s", err, errOut)
	}
	time.Sleep(2 * time.Second) // gossip with the new primary before the old key goes
	if out, errOut, err := sc.cli(sc.admin, "keyring", "remove", security.Fingerprint(k1)); err != nil {
		t.Fatalf("remove: %v %s %s", err, out, errOut)
	}
	wantKeyring(t, sc, k2, k2)
	for _, p := range sc.Procs {
		keys, err := security.LoadKeyringFile(filepath.Join(sc.Dir, p.ID+".keyring"))
		if err != nil || len(keys) != 1 || string(keys[0]) != string(k2) {
			t.Fatalf("%s's keyring file: %d keys, %v; want the new key only", p.ID, len(keys), err)
		}
	}
	// A reader may not even list the keyring.
	reader := sc.issue(t, "bob", security.CertRequest{Role: security.RoleReader})
	if _, errOut, err := sc.cli(reader, "keyring", "list"); err == nil || !strings.Contains(errOut, "PermissionDenied") {
		t.Fatalf("reader keyring list: %v %s", err, errOut)
	}

	// Certificates: every node's and the admin's replaced on disk.
	old := map[string]string{}
	for _, p := range sc.Procs {
		old[p.ID] = servedSerial(t, p.GRPC, sc.admin)
		if _, err := security.IssueDev(sc.ca, sc.pki, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	sc.issue(t, "admin", security.CertRequest{Role: security.RoleAdmin})
	time.Sleep(security.PollInterval + 500*time.Millisecond)
	for _, p := range sc.Procs {
		if now := servedSerial(t, p.GRPC, sc.admin); now == old[p.ID] {
			t.Fatalf("%s still serves its old certificate %s", p.ID, now)
		}
	}
	// Raft still replicates over the rotated certificates: a write
	// through each node.
	for _, p := range sc.Procs {
		cl := sc.client(t, sc.admin, p)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte("/rotated/" + p.ID), Value: []byte("1")})
		cancel()
		if err != nil {
			t.Fatalf("put via %s after rotation: %v", p.ID, err)
		}
	}
	time.Sleep(time.Second)
	l.finish(t)

	// A member without the key: it cannot join, and sees no one.
	stranger, err := localcluster.Add(sc.Bin, sc.Dir, sc.Procs)
	if err != nil {
		t.Fatal(err)
	}
	if err := localcluster.SetKeyring(stranger, nil); err != nil { // its certificate is good, its gossip plain
		t.Fatal(err)
	}
	sc.Procs = append(sc.Procs, stranger)
	sc.Start(stranger)
	time.Sleep(8 * time.Second)
	cl := sc.client(t, sc.admin, sc.Procs[0])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r.Members {
		if m.Id == stranger.ID {
			t.Fatalf("a member without the key joined: %+v", m)
		}
	}
	scl := sc.client(t, sc.admin, stranger)
	r, err = scl.Cluster.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 1 || r.Members[0].Id != stranger.ID {
		t.Fatalf("the member without the key sees %v; want only itself", r.Members)
	}
}

// servedSerial is the serial number of the certificate the node at addr
// serves (hex).
func servedSerial(t *testing.T, addr string, f security.Files) string {
	t.Helper()
	m, err := security.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", addr, m.ClientConfig("127.0.0.1", "h2"))
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}
