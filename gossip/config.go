package gossip

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures one gossip member. Build it from DefaultConfig, set Meta,
// BindAddr and Join, and hand it to New, which clones it; it is never mutated
// after that.
//
// The failure-detection fields map one to one onto hashicorp/memberlist's
// Config (see its config.go for the SWIM/Lifeguard meaning of each). A member
// that stops answering (crash, SIGKILL, power loss, partition) is declared
// dead by the others after
//
//	waiting for its probe turn   ≤ (N-1) × ProbeInterval, ~1 on average
//	+ one failed probe           ProbeInterval (direct, indirect and TCP pings)
//	+ suspicion                  SuspicionMult × ProbeInterval if another
//	                             member confirms the suspicion, else up to
//	                             SuspicionMaxTimeoutMult times that
//
// (suspicion scales with log10(N) past 10 members). With the defaults that
// is 0.75 to 2.25 s on a 3-member cluster (the figures measured on
// loopback are in DESIGN.md, "Failure detection").
type Config struct {
	// Meta is this member's metadata. Meta.ID is the memberlist node name
	// and must be unique in the cluster. Required.
	Meta Meta

	// BindAddr is the host:port the gossip UDP and TCP listeners bind to.
	// Port 0 picks a free port (the same one for UDP and TCP); LocalAddr
	// reports it. An empty host binds all interfaces. Default "0.0.0.0:7002".
	BindAddr string

	// AdvertiseAddr is the IP (or host, resolved at Open), optionally with
	// a port, that other members use to reach this one. Empty means: the
	// bind address if it is specific, else the first private IP of this
	// machine (memberlist's rule). A missing port means the bound port.
	AdvertiseAddr string

	// Join lists gossip addresses (host:port) of existing members. Open
	// joins them in the background, retrying with backoff for JoinRetryMax.
	// Our own advertised address is skipped, so every node of a cluster can
	// be given the same list. Empty means: start a new cluster.
	Join []string

	// SecretKey, if set, encrypts and authenticates all gossip with
	// AES-GCM; it must be 16, 24 or 32 bytes (AES-128/192/256) and the same
	// on every member. Members with a different key (or none) cannot join.
	SecretKey []byte
	// Keyring, if set, holds the encryption keys instead (memberlist's
	// Keyring: the primary encrypts, every key decrypts), so keys can be
	// installed, made primary and removed on a live member. SecretKey, if
	// also set, is added to it as the primary.
	Keyring *memberlist.Keyring

	// Label, if set, is stamped on every gossip packet and stream; members
	// with another label (another cluster, or a test's neighbour that got
	// a reused port) are refused. Same on every member. Default "".
	Label string

	// JoinRetryMax is how long the background join of Open keeps retrying
	// before it gives up and Joined reports the error. 0 retries until
	// Close. Default 60 s.
	JoinRetryMax time.Duration

	// ProbeInterval is the time between two failure-detection probes of
	// this member; each probe targets the next member in a shuffled
	// round-robin order. Default 250 ms.
	ProbeInterval time.Duration

	// ProbeTimeout is how long a direct UDP ping waits for its ack before
	// the probe falls back to indirect pings through other members and a
	// TCP ping. Must be below ProbeInterval. Default 200 ms.
	ProbeTimeout time.Duration

	// SuspicionMult scales how long a suspected member may refute before it
	// is declared dead: SuspicionMult × max(1, log10(N)) × ProbeInterval
	// once confirmed by SuspicionMult-2 other members. Default 3.
	SuspicionMult int

	// SuspicionMaxTimeoutMult sets the Lifeguard suspicion timeout used
	// while nobody else has confirmed a suspicion: SuspicionMaxTimeoutMult ×
	// the value above, shrinking towards it with each confirmation. It makes
	// a single slow or cut-off prober less likely to kill a healthy member.
	// Only used when SuspicionMult > 2 and the cluster has at least
	// SuspicionMult members. Default 2.
	SuspicionMaxTimeoutMult int

	// GossipInterval is the time between gossip rounds, each sending queued
	// broadcasts (alive, suspect, dead, metadata) to GossipNodes random
	// members. Default 100 ms.
	GossipInterval time.Duration

	// GossipNodes is the fan-out of each gossip round. Default 3.
	GossipNodes int

	// PushPullInterval is the time between full state exchanges over TCP
	// with one random member; they heal partitions and missed broadcasts.
	// Default 5 s.
	PushPullInterval time.Duration

	// TCPTimeout bounds a TCP connection to one member (join, push/pull).
	// Default 5 s.
	TCPTimeout time.Duration

	// DeadNodeReclaimTime is how long after a member is declared dead its
	// ID may be taken over by a process at a different address (a node
	// restarted on a new port). Before that, such a process is reported as
	// a conflict. Default 5 s.
	DeadNodeReclaimTime time.Duration

	// DeadRetention is how long Members keeps reporting a dead or left
	// member after the event, and how long a dead member is retried by the
	// reconnect loop. 0 keeps them forever. Default 1 h.
	DeadRetention time.Duration

	// ReconnectInterval is the period of the reconnect loop, which tries to
	// join one random dead member (so that the two sides of a healed
	// partition, or a member restarted without --join, merge again) and,
	// while no other member is alive, the Join addresses. 0 disables it.
	// Default 2 s.
	ReconnectInterval time.Duration

	// SuspectPoll is how often the member reads memberlist's view for
	// members it suspects (memberlist tells its delegates of joins,
	// updates, leaves and deaths, not of suspicion) and publishes an
	// EventSuspect for each member that became suspect since the last
	// read. Suspicion lasts about SuspicionMult × ProbeInterval, so a poll
	// well below that sees it. 0 disables the poll. Default 50 ms.
	SuspectPoll time.Duration
	// Logger receives this package's and memberlist's logs (memberlist's
	// [DEBUG]/[INFO]/[WARN]/[ERR] lines are mapped to slog levels). nil
	// means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the LAN configuration used by raftps nodes. It is
// tuned so that a killed member is declared dead by the others within 3 s on
// a small (3 to 9 member) cluster; see Config for each field's default.
func DefaultConfig() Config {
	return Config{
		BindAddr:                "0.0.0.0:7002",
		JoinRetryMax:            60 * time.Second,
		ProbeInterval:           250 * time.Millisecond,
		ProbeTimeout:            200 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 2,
		GossipInterval:          100 * time.Millisecond,
		GossipNodes:             3,
		PushPullInterval:        5 * time.Second,
		TCPTimeout:              5 * time.Second,
		DeadNodeReclaimTime:     5 * time.Second,
		DeadRetention:           time.Hour,
		ReconnectInterval:       2 * time.Second,
		SuspectPoll:             50 * time.Millisecond,
	}
}

// Validate reports the first problem with c, or nil. ErrKeyLength and
// ErrMetaTooLarge are returned wrapped.
func (c Config) Validate() error {
	if c.Meta.ID == "" {
		return fmt.Errorf("gossip: config: Meta.ID is required")
	}
	if _, err := encodeMeta(c.Meta, 0); err != nil {
		return fmt.Errorf("gossip: config: %w", err)
	}
	if err := checkKey(c.SecretKey); err != nil {
		return fmt.Errorf("gossip: config: %w", err)
	}
	if _, _, err := splitBindAddr(c.BindAddr); err != nil {
		return fmt.Errorf("gossip: config: BindAddr: %w", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitAdvertiseAddr(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("gossip: config: AdvertiseAddr: %w", err)
		}
	}
	switch {
	case len(c.Label) > memberlist.LabelMaxSize:
		return fmt.Errorf("gossip: config: Label is %d bytes, limit %d", len(c.Label), memberlist.LabelMaxSize)
	case c.JoinRetryMax < 0:
		return fmt.Errorf("gossip: config: JoinRetryMax %v < 0", c.JoinRetryMax)
	case c.ProbeInterval <= 0:
		return fmt.Errorf("gossip: config: ProbeInterval %v must be > 0", c.ProbeInterval)
	case c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.ProbeInterval:
		return fmt.Errorf("gossip: config: ProbeTimeout %v must be in (0, ProbeInterval %v)", c.ProbeTimeout, c.ProbeInterval)
	case c.SuspicionMult < 1:
		return fmt.Errorf("gossip: config: SuspicionMult %d must be ≥ 1", c.SuspicionMult)
	case c.SuspicionMaxTimeoutMult < 1:
		return fmt.Errorf("gossip: config: SuspicionMaxTimeoutMult %d must be ≥ 1", c.SuspicionMaxTimeoutMult)
	case c.GossipInterval <= 0:
		return fmt.Errorf("gossip: config: GossipInterval %v must be > 0", c.GossipInterval)
	case c.GossipNodes < 1:
		return fmt.Errorf("gossip: config: GossipNodes %d must be ≥ 1", c.GossipNodes)
	case c.PushPullInterval <= 0:
		return fmt.Errorf("gossip: config: PushPullInterval %v must be > 0", c.PushPullInterval)
	case c.TCPTimeout <= 0:
		return fmt.Errorf("gossip: config: TCPTimeout %v must be > 0", c.TCPTimeout)
	case c.DeadNodeReclaimTime < 0:
		return fmt.Errorf("gossip: config: DeadNodeReclaimTime %v < 0", c.DeadNodeReclaimTime)
	case c.DeadRetention < 0:
		return fmt.Errorf("gossip: config: DeadRetention %v < 0", c.DeadRetention)
	case c.ReconnectInterval < 0:
		return fmt.Errorf("gossip: config: ReconnectInterval %v < 0", c.ReconnectInterval)
	case c.SuspectPoll < 0:
		return fmt.Errorf("gossip: config: SuspectPoll %v < 0", c.SuspectPoll)
	}
	return nil
}

// clone returns a deep copy of c.
func (c Config) clone() Config {
	c.Meta = c.Meta.clone()
	c.Join = append([]string(nil), c.Join...)
	c.SecretKey = append([]byte(nil), c.SecretKey...)
	if len(c.SecretKey) == 0 {
		c.SecretKey = nil
	}
	return c
}

func checkKey(k []byte) error {
	switch len(k) {
	case 0, 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: got %d bytes", ErrKeyLength, len(k))
}

// splitBindAddr parses "host:port"; an empty host means 0.0.0.0.
func splitBindAddr(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("host %q is not an IP address", host)
	}
	return host, int(port), nil
}

// splitAdvertiseAddr parses "host" or "host:port"; port -1 means none.
func splitAdvertiseAddr(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		// No port (or a bare IPv6 address).
		if s == "" {
			return "", 0, fmt.Errorf("empty")
		}
		return s, -1, nil
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if host == "" {
		return "", 0, fmt.Errorf("empty host in %q", s)
	}
	return host, int(port), nil
}
