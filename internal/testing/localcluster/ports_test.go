package localcluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestFreePortsBelowEphemeral: FreePorts returns distinct ports that a
// listener can bind (TCP and UDP), below the kernel's ephemeral range when
// this machine has room below it (a released ephemeral port can become
// another process's outgoing source port before the node binds it; Linux's
// default range starts at 32768), else the kernel's choice.
func TestFreePortsBelowEphemeral(t *testing.T) {
	lo, hi := belowEphemeral()
	t.Logf("ports below the ephemeral range: [%d, %d)", lo, hi)
	ports, err := FreePorts(24)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice in %v", p, ports)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Errorf("port %d outside [%d, %d), below the ephemeral range", p, lo, hi)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d not free for TCP: %v", p, err)
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			l.Close()
			t.Fatalf("port %d not free for UDP: %v", p, err)
		}
		u.Close()
		l.Close()
	}
}

// TestFreePortsReserved: a port FreePorts handed out is not handed out
// again (by any process on the machine) while its reservation holds, so
// two test processes starting clusters at once never give two nodes one
// port; a reservation older than portHold is taken over.
func TestFreePortsReserved(t *testing.T) {
	old := portDir
	portDir = t.TempDir()
	t.Cleanup(func() { portDir = old })

	a, err := FreePorts(12)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FreePorts(12)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range b {
		if slices.Contains(a, p) {
			t.Fatalf("port %d handed out twice: %v then %v", p, a, b)
		}
	}
	if reserve(a[0]) {
		t.Fatalf("port %d reserved again while its reservation holds", a[0])
	}
	stale := time.Now().Add(-portHold - time.Minute)
	if err := os.Chtimes(filepath.Join(portDir, strconv.Itoa(a[0])), stale, stale); err != nil {
		t.Fatal(err)
	}
	if !reserve(a[0]) {
		t.Fatalf("a reservation of port %d older than %v was not taken over", a[0], portHold)
	}
}
