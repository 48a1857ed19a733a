package gossip

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestMetaAddressesRoundTrip: the per-class addresses travel in the
// metadata, and Peer falls back to GRPCAddr for a member that announces
// no PeerAddr (one that serves everything on one port).
func TestMetaAddressesRoundTrip(t *testing.T) {
	m := Meta{ID: "n1", Roles: Roles(), GRPCAddr: "10.0.0.1:7000", RaftAddr: "10.0.0.1:7001",
		HTTPAddr: "10.0.0.1:7003", PeerAddr: "10.0.0.1:40001", PServerAddr: "10.0.0.1:40002", Zone: "rack-2"}
	b, err := encodeMeta(m, 7)
	if err != nil {
		t.Fatal(err)
	}
	got, inc, err := decodeMeta(b)
	if err != nil || inc != 7 || !reflect.DeepEqual(got, m) {
		t.Fatalf("decode(encode(m)) = %+v, %d, %v; want %+v, 7", got, inc, err, m)
	}
	if got.Peer() != "10.0.0.1:40001" {
		t.Fatalf("Peer() = %q", got.Peer())
	}
	old, _, err := decodeMeta([]byte(`{"id":"n2","g":"10.0.0.2:7000"}`))
	if err != nil || old.Peer() != "10.0.0.2:7000" || old.PServerAddr != "" {
		t.Fatalf("meta without peer address: %+v %v, want Peer() = GRPCAddr", old, err)
	}
	if !m.HasRole(RolePServer) || (Meta{Roles: []string{RoleTrainer}}).HasRole(RoleServer) || ValidRole("cook") {
		t.Fatal("role predicates")
	}
	long := m
	long.PServerAddr = strings.Repeat("h", MaxMetaSize)
	if _, err := encodeMeta(long, 1); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("oversized meta: %v, want ErrMetaTooLarge", err)
	}
}
