package gossip

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Roles a node can have (Meta.Roles; `raftps node --roles`).
const (
	// RoleServer: a Raft voter (may lead; runs the master on the leader).
	// Nodes without it join as non-voters.
	RoleServer = "server"
	// RolePServer: hosts parameter-server slots.
	RolePServer = "pserver"
	// RoleTrainer: runs trainers of the jobs.
	RoleTrainer = "trainer"
)

// Roles lists every known role, in the order the CLI documents them.
func Roles() []string { return []string{RoleServer, RolePServer, RoleTrainer} }

// ValidRole reports whether r is one of Roles.
func ValidRole(r string) bool { return slices.Contains(Roles(), r) }

// MaxMetaSize is the largest encoded Meta memberlist carries (512 bytes).
const MaxMetaSize = memberlist.MetaMaxSize

// Meta is what a member tells the cluster about itself. It travels as
// compact JSON in memberlist's node metadata; the encoding (with the
// member's Incarnation) must fit in MaxMetaSize bytes, else ErrMetaTooLarge.
type Meta struct {
	ID       string   // node ID, unique in the cluster; also the memberlist node name
	Roles    []string // RoleServer, RolePServer, RoleTrainer
	GRPCAddr string   // host:port of the node's gRPC client API
	RaftAddr string   // host:port of the node's Raft transport
	HTTPAddr string   // host:port of the node's HTTP (metrics, health) server
	// PeerAddr is the host:port of the node-to-node gRPC services (write
	// forwarding, checkpoint blobs); empty for a node that serves them on
	// GRPCAddr (use Meta.Peer).
	PeerAddr string
	// PServerAddr is the host:port of the pserver data path (Pull, Push);
	// empty for a node without it.
	PServerAddr string
	// PServerInstance is the node process's instance (random at each
	// start; pserver/agent's Config.Instance): replica records name
	// backups with it, so a restarted node is told from its previous
	// process. Empty for a node without the pserver role.
	PServerInstance string
	// PServerBudget and TrainerBudget are the bytes this node's pserver
	// slots and trainers may allocate (`raftps node
	// --pserver-memory-budget`, `--trainer-memory-budget`); the master
	// admits a job against them. 0: not announced (not counted).
	PServerBudget uint64
	TrainerBudget uint64
	// Zone is the node's failure domain (`raftps node --zone`); empty:
	// none. Replicated slots place their backups across zones.
	Zone string
}

// Peer is the address of m's node-to-node services: PeerAddr, or GRPCAddr
// for a member that announces none.
func (m Meta) Peer() string {
	if m.PeerAddr != "" {
		return m.PeerAddr
	}
	return m.GRPCAddr
}

// HasRole reports whether m lists role (RoleServer, RolePServer,
// RoleTrainer): the one role predicate of the code base.
func (m Meta) HasRole(role string) bool { return HasRole(m.Roles, role) }

// HasRole reports whether roles lists role; Meta.HasRole for a bare list
// (a node's configuration before it has a Meta).
func HasRole(roles []string, role string) bool { return slices.Contains(roles, role) }

func (m Meta) clone() Meta {
	m.Roles = slices.Clone(m.Roles)
	return m
}

// wireMeta is the encoding of Meta. Short keys keep it small; unknown keys
// are ignored on decode, so fields can be added compatibly.
type wireMeta struct {
	ID          string   `json:"id"`
	Roles       []string `json:"r,omitempty"`
	GRPCAddr    string   `json:"g,omitempty"`
	RaftAddr    string   `json:"ra,omitempty"`
	HTTPAddr    string   `json:"h,omitempty"`
	PeerAddr    string   `json:"p,omitempty"`
	PServerAddr string   `json:"ps,omitempty"`
	PSInstance  string   `json:"pi,omitempty"`
	PSBudget    uint64   `json:"pb,omitempty"`
	TBudget     uint64   `json:"tb,omitempty"`
	Zone        string   `json:"z,omitempty"`
	Incarnation uint32   `json:"i,omitempty"`
}

func encodeMeta(m Meta, incarnation uint32) ([]byte, error) {
	b, err := json.Marshal(wireMeta{
		ID: m.ID, Roles: m.Roles, GRPCAddr: m.GRPCAddr, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr,
		PeerAddr: m.PeerAddr, PServerAddr: m.PServerAddr, PSInstance: m.PServerInstance, PSBudget: m.PServerBudget, TBudget: m.TrainerBudget,
		Zone: m.Zone, Incarnation: incarnation,
	})
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	// Leave room for the largest incarnation so a later UpdateMeta of the
	// same Meta cannot grow past the limit.
	if n := len(b) + len(`,"i":4294967295`); n > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d", ErrMetaTooLarge, n, MaxMetaSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (Meta, uint32, error) {
	var w wireMeta
	if err := json.Unmarshal(b, &w); err != nil {
		return Meta{}, 0, fmt.Errorf("decode meta: %w", err)
	}
	return Meta{ID: w.ID, Roles: w.Roles, GRPCAddr: w.GRPCAddr, RaftAddr: w.RaftAddr, HTTPAddr: w.HTTPAddr,
		PeerAddr: w.PeerAddr, PServerAddr: w.PServerAddr, PServerInstance: w.PSInstance, PServerBudget: w.PSBudget, TrainerBudget: w.TBudget,
		Zone: w.Zone}, w.Incarnation, nil
}

// Status is a member's state as seen by this member.
type Status int

// Member states, from memberlist's alive/suspect/dead/left.
const (
	StatusAlive   Status = iota + 1 // answering probes
	StatusSuspect                   // missed a probe; may still refute
	StatusDead                      // declared dead after suspicion (crash, kill, partition)
	StatusLeft                      // left gracefully (Leave or Close)
)

func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusSuspect:
		return "suspect"
	case StatusDead:
		return "dead"
	case StatusLeft:
		return "left"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Member is one member of the cluster as seen by this member.
type Member struct {
	Meta       Meta
	GossipAddr string // host:port memberlist reaches it at
	Status     Status

	// Incarnation orders the metadata versions of one member ID. The
	// member stamps it itself: it starts at the Unix time (seconds) at
	// which its Gossip was created and grows by one with every UpdateMeta.
	// So a restarted process of the same ID usually shows a higher
	// Incarnation than its previous life (given a sane clock and fewer
	// metadata updates than seconds of uptime). It is not memberlist's
	// internal SWIM incarnation, which memberlist does not expose.
	Incarnation uint32
}

// EventType says what happened to a member.
type EventType int

// Event types.
const (
	EventJoin     EventType = iota + 1 // member became alive (first seen, or back after dead/left)
	EventLeave                         // member left gracefully; Status is StatusLeft
	EventFail                          // member was declared dead; Status is StatusDead
	EventUpdate                        // member's metadata changed
	EventConflict                      // a second process claims an ID that is alive at another address
	EventSuspect                       // member is suspected (missed probes; may refute); Status is StatusSuspect
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	case EventUpdate:
		return "update"
	case EventConflict:
		return "conflict"
	case EventSuspect:
		return "suspect"
	}
	return fmt.Sprintf("event(%d)", int(t))
}

// Event reports a change of one member. For EventConflict, Member is the
// process that was refused (its GossipAddr is the conflicting address) and
// its Status is the state of the member that holds the ID.
type Event struct {
	Type   EventType
	Member Member
}
