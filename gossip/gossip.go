package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Errors returned by this package, wrapped; test with errors.Is.
var (
	ErrOpen         = errors.New("gossip: already open")
	ErrNotOpen      = errors.New("gossip: not open")
	ErrMetaTooLarge = errors.New("gossip: metadata too large")
	ErrKeyLength    = errors.New("gossip: secret key must be 16, 24 or 32 bytes")
	ErrJoin         = errors.New("gossip: join failed")
	ErrConflict     = errors.New("gossip: node ID is in use by another member")
)

const (
	joinBackoffMin = 100 * time.Millisecond
	joinBackoffMax = 2 * time.Second
	// closeLeaveTimeout bounds the leave broadcast of Close.
	closeLeaveTimeout = 2 * time.Second
	// updateTimeout bounds UpdateMeta's wait for its broadcast when ctx has
	// no deadline.
	updateTimeout = 10 * time.Second
	// subBuffer is the per-subscriber event buffer; past it the oldest
	// event is dropped.
	subBuffer = 1024
)

type lifecycle int32

const (
	stateNew lifecycle = iota
	stateOpen
	stateClosed
)

// Gossip is one member of a memberlist cluster. Create it with New, start it
// with Open, stop it with Close. All methods are safe for concurrent use.
type Gossip struct {
	cfg Config
	log *slog.Logger

	// lifeMu serializes Open, Leave, UpdateMeta and Close. It is never held
	// by memberlist callbacks.
	lifeMu      sync.Mutex
	state       atomic.Int32 // lifecycle
	ml          *memberlist.Memberlist
	left        bool
	incarnation uint32 // of the local meta
	localAddr   string
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	metaBytes atomic.Pointer[[]byte] // encoded local meta, read by NodeMeta

	// selfConflicts counts conflicts about our own ID; conflicted is set
	// when one of them made our Join fail, i.e. we are the claimant.
	selfConflicts atomic.Uint64
	conflicted    atomic.Bool

	joined     chan struct{} // closed at the first successful join
	joinedOnce sync.Once
	joinDone   chan struct{} // closed when Open's background join returns

	// returned carries the gossip addresses of members seen alive again
	// after being dead; the reconnect loop pushes our state to them (see
	// reconnectLoop). Sends never block: observe runs under memberlist's
	// node lock.
	returned chan string

	// mu guards the member table and the subscribers. memberlist calls the
	// event delegate with its own node lock held, so mu is never held while
	// calling into memberlist.
	mu      sync.Mutex
	members map[string]entry
	subs    map[*subscriber]struct{}
	joinErr error
	// conflictSeen rate-limits conflict reports per claimant address:
	// memberlist reports one for every alive message the claimant sends.
	conflictSeen map[string]time.Time
}

// conflictQuiet is how long repeated conflicts from one claimant are not
// reported again.
const conflictQuiet = 10 * time.Second

type entry struct {
	m     Member
	since time.Time
}

type subscriber struct {
	ch      chan Event
	dropped uint64
}

// New validates cfg and returns a Gossip that is not yet open. It does no
// I/O.
func New(cfg Config) (*Gossip, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.clone()
	l := cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	g := &Gossip{
		cfg:         cfg,
		log:         l.With("component", "gossip", "node", cfg.Meta.ID),
		incarnation: uint32(time.Now().Unix()),
		joined:      make(chan struct{}),
		joinDone:    make(chan struct{}),
		returned:    make(chan string, 16),
		members:     make(map[string]entry),
		subs:        make(map[*subscriber]struct{}),

		conflictSeen: make(map[string]time.Time),
	}
	b, err := encodeMeta(cfg.Meta, g.incarnation)
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	g.metaBytes.Store(&b)
	return g, nil
}

// Open binds the gossip listeners and starts memberlist with this member
// alone in its view, then returns. If Config.Join is set, it joins those
// members in the background, retrying with exponential backoff (100 ms to
// 2 s) for Config.JoinRetryMax; use Joined or JoinedCh to wait for it. ctx
// bounds only the resolution of AdvertiseAddr, not the background join,
// which lives until Close. Returns ErrOpen if already opened.
func (g *Gossip) Open(ctx context.Context) error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	switch lifecycle(g.state.Load()) {
	case stateOpen:
		return ErrOpen
	case stateClosed:
		return fmt.Errorf("%w: closed", ErrNotOpen)
	}

	mc, err := g.memberlistConfig(ctx)
	if err != nil {
		return err
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("gossip: start memberlist on %s: %w", g.cfg.BindAddr, err)
	}
	g.ml = ml
	g.localAddr = ml.LocalNode().Address()
	g.state.Store(int32(stateOpen))
	g.log.Info("gossip started", "addr", g.localAddr, "encrypted", len(g.cfg.SecretKey) > 0 || g.cfg.Keyring != nil)
	if !stateOffsetOK {
		g.log.Warn("gossip cannot read memberlist's node state (unexpected memberlist version); graceful leaves will be reported as failures")
	}

	bg, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	if g.cfg.ReconnectInterval > 0 {
		g.wg.Go(func() { g.reconnectLoop(bg) })
	}
	if g.cfg.SuspectPoll > 0 {
		if !nodeLockOK || !stateOffsetOK {
			g.log.Warn("gossip cannot read memberlist's node state (unexpected memberlist version); suspicion will not be reported")
		} else {
			g.wg.Go(func() { g.suspectLoop(bg) })
		}
	}
	join := g.withoutSelf(g.cfg.Join)
	if len(join) == 0 {
		g.markJoined()
		close(g.joinDone)
		return nil
	}
	g.wg.Go(func() { g.joinLoop(bg, join) })
	return nil
}

func (g *Gossip) memberlistConfig(ctx context.Context) (*memberlist.Config, error) {
	c := g.cfg
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.Meta.ID
	host, port, err := splitBindAddr(c.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip: BindAddr: %w", err)
	}
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertisePort = port
	if c.AdvertiseAddr != "" {
		ahost, aport, err := splitAdvertiseAddr(c.AdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("gossip: AdvertiseAddr: %w", err)
		}
		if net.ParseIP(ahost) == nil {
			ips, err := net.DefaultResolver.LookupIPAddr(ctx, ahost)
			if err != nil || len(ips) == 0 {
				return nil, fmt.Errorf("gossip: resolve AdvertiseAddr %q: %v", ahost, err)
			}
			ahost = ips[0].IP.String()
			for _, ip := range ips {
				if ip.IP.To4() != nil {
					ahost = ip.IP.String()
					break
				}
			}
		}
		mc.AdvertiseAddr = ahost
		if aport >= 0 {
			mc.AdvertisePort = aport
		}
	}
	if len(c.SecretKey) > 0 {
		mc.SecretKey = c.SecretKey
	}
	mc.Keyring = c.Keyring
	mc.Label = c.Label
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.SuspicionMaxTimeoutMult = c.SuspicionMaxTimeoutMult
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.TCPTimeout
	mc.DeadNodeReclaimTime = c.DeadNodeReclaimTime
	mc.Delegate = (*delegate)(g)
	mc.Events = (*delegate)(g)
	mc.Conflict = (*delegate)(g)
	mc.Logger = newMemberlistLogger(g.log)
	return mc, nil
}

// withoutSelf drops our own address (the advertised IP, or an unspecified
// IP, with our port) from addrs, so that a node given the whole cluster's
// list does not "join" itself. Other spellings of ourselves (host names)
// are caught by Join, which does not count a join that found nobody else.
func (g *Gossip) withoutSelf(addrs []string) []string {
	lhost, lport, _ := net.SplitHostPort(g.localAddr)
	lip := net.ParseIP(lhost)
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err == nil && port == lport {
			ip := net.ParseIP(host)
			if ip != nil && (ip.Equal(lip) || ip.IsUnspecified()) {
				g.log.Debug("skipping own address in join list", "addr", a)
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

func (g *Gossip) joinLoop(ctx context.Context, addrs []string) {
	defer close(g.joinDone)
	if g.cfg.JoinRetryMax > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.JoinRetryMax)
		defer cancel()
	}
	n, err := g.Join(ctx, addrs)
	if err != nil {
		g.mu.Lock()
		g.joinErr = err
		g.mu.Unlock()
		g.log.Error("gossip join gave up", "join", addrs, "err", err)
		return
	}
	g.log.Info("gossip joined", "contacted", n, "join", addrs)
}

// reconnectLoop heals the view after partitions and restarts, like Serf's
// reconnect: memberlist never contacts a member again once it is dead, so
// two sides of a long partition would stay apart. Every ReconnectInterval
// it tries to join one random dead member (not left ones) and, when no
// other member is alive, the configured Join addresses.
//
// It also pushes our state at once to a member that came back from dead
// (observe sends it on returned). A member that restarts without --join
// addresses is seen alive again by the others as soon as it refutes the
// dead messages gossiped to it, so their reconnect never joins it; without
// this push it would learn of them only at their next periodic push/pull,
// which picks it at random (12 s after a restart in a 3-member test).
func (g *Gossip) reconnectLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		var targets []string
		select {
		case <-ctx.Done():
			return
		case addr := <-g.returned:
			targets = []string{addr}
		case <-t.C:
			targets = g.reconnectTargets()
		}
		if len(targets) == 0 {
			continue
		}
		n, err := g.ml.Join(targets)
		if n > 0 {
			g.log.Info("gossip reconnected", "addrs", targets, "contacted", n)
			g.markJoined()
		} else {
			g.log.Debug("gossip reconnect failed", "addrs", targets, "err", err)
		}
	}
}

func (g *Gossip) reconnectTargets() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var dead []string
	alive := 0
	for id, e := range g.members {
		switch {
		case id == g.cfg.Meta.ID:
		case e.m.Status == StatusDead:
			dead = append(dead, e.m.GossipAddr)
		case e.m.Status == StatusAlive || e.m.Status == StatusSuspect:
			alive++
		}
	}
	var out []string
	if len(dead) > 0 {
		out = append(out, dead[rand.IntN(len(dead))])
	}
	if alive == 0 {
		for _, a := range g.withoutSelf(g.cfg.Join) {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

func (g *Gossip) markJoined() { g.joinedOnce.Do(func() { close(g.joined) }) }

// Join contacts the members at addrs (gossip host:port) and merges their
// state, retrying all of them with exponential backoff (100 ms doubling to
// 2 s, ±20 % jitter) until at least one answers or ctx is done. It returns
// how many answered. The error wraps ErrJoin and ctx.Err() when ctx ends
// first, ErrConflict when the members we reached already have a live member
// with our ID at another address (the caller should then Close: this
// process is refused by the cluster), or ErrNotOpen.
func (g *Gossip) Join(ctx context.Context, addrs []string) (int, error) {
	if lifecycle(g.state.Load()) != stateOpen {
		return 0, ErrNotOpen
	}
	if len(addrs) == 0 {
		return 0, fmt.Errorf("%w: no addresses", ErrJoin)
	}
	backoff := joinBackoffMin
	for attempt := 1; ; attempt++ {
		conflicts := g.selfConflicts.Load()
		n, err := g.ml.Join(addrs)
		if g.selfConflicts.Load() != conflicts {
			// A live member holds our ID at another address. Checked before
			// the test below: a duplicate of a one-member cluster hears back
			// only its own name and would otherwise retry forever.
			g.conflicted.Store(true)
			return n, fmt.Errorf("%w: %q (joined via %v)", ErrConflict, g.cfg.Meta.ID, addrs)
		}
		if n > 0 && g.ml.NumMembers() < 2 {
			// Only ourselves answered (our address under another name).
			n, err = 0, errors.New("no member other than ourselves answered")
		}
		if n > 0 {
			g.markJoined()
			return n, nil
		}
		if lifecycle(g.state.Load()) != stateOpen {
			return 0, ErrNotOpen
		}
		g.log.Debug("gossip join attempt failed", "attempt", attempt, "join", addrs, "retry_in", backoff, "err", err)
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("%w: %v after %d attempts: %w (last error: %v)", ErrJoin, addrs, attempt, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, joinBackoffMax)
	}
}

// JoinedCh returns a channel that is closed once this member has joined
// another one (or at Open, when Config.Join is empty).
func (g *Gossip) JoinedCh() <-chan struct{} { return g.joined }

// Joined waits until this member has joined another one (see JoinedCh). It
// returns nil then, the background join's error if Open's join gave up
// (wrapping ErrJoin or ErrConflict), or ctx.Err().
func (g *Gossip) Joined(ctx context.Context) error {
	select {
	case <-g.joined:
		return nil
	case <-g.joinDone:
		select {
		case <-g.joined:
			return nil
		default:
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.joinErr != nil {
			return g.joinErr
		}
		return ErrNotOpen // closed before joining
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LocalID returns this member's ID (Config.Meta.ID).
func (g *Gossip) LocalID() string { return g.cfg.Meta.ID }

// LocalAddr returns the gossip host:port this member advertises (with the
// actual port when Config.BindAddr had port 0), or "" before Open.
func (g *Gossip) LocalAddr() string {
	if lifecycle(g.state.Load()) == stateNew {
		return "" // localAddr is written before the state becomes open
	}
	return g.localAddr
}

// Members returns every member this member knows of, itself included,
// sorted by ID. Dead and left members stay listed for Config.DeadRetention
// after their event (unless they come back). The slice is a copy.
//
// Status is one of alive, dead and left: a suspected member stays alive
// here until it is declared dead (suspicion is a hint, published as
// EventSuspect; see suspectLoop).
func (g *Gossip) Members() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked(time.Now())
	out := make([]Member, 0, len(g.members))
	for _, e := range g.members {
		out = append(out, cloneMember(e.m))
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Meta.ID < b.Meta.ID:
			return -1
		case a.Meta.ID > b.Meta.ID:
			return 1
		}
		return 0
	})
	return out
}

// Member returns the member with the given ID, as Members would.
func (g *Gossip) Member(id string) (Member, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked(time.Now())
	e, ok := g.members[id]
	if !ok {
		return Member{}, false
	}
	return cloneMember(e.m), true
}

func (g *Gossip) pruneLocked(now time.Time) {
	if g.cfg.DeadRetention == 0 {
		return
	}
	for id, e := range g.members {
		if (e.m.Status == StatusDead || e.m.Status == StatusLeft) && now.Sub(e.since) > g.cfg.DeadRetention {
			delete(g.members, id)
		}
	}
}

func cloneMember(m Member) Member {
	m.Meta = m.Meta.clone()
	return m
}

// Subscribe returns a channel that receives every member event from now on,
// and a function that cancels the subscription and closes the channel (safe
// to call more than once). Each subscriber has its own buffer of 1024
// events; when a subscriber falls that far behind, its oldest event is
// dropped and a warning logged, so memberlist is never blocked. Events are
// hints: a subscriber that needs the truth subscribes first, then reads
// Members. The channel is closed by Close.
func (g *Gossip) Subscribe() (<-chan Event, func()) {
	s := &subscriber{ch: make(chan Event, subBuffer)}
	g.mu.Lock()
	if lifecycle(g.state.Load()) == stateClosed {
		g.mu.Unlock()
		close(s.ch)
		return s.ch, func() {}
	}
	g.subs[s] = struct{}{}
	g.mu.Unlock()
	return s.ch, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if _, ok := g.subs[s]; ok {
			delete(g.subs, s)
			close(s.ch)
		}
	}
}

// publishLocked sends ev to every subscriber without blocking. g.mu held.
func (g *Gossip) publishLocked(ev Event) {
	for s := range g.subs {
		for {
			select {
			case s.ch <- ev:
			default:
				select {
				case <-s.ch:
					s.dropped++
					if s.dropped == 1 || s.dropped%100 == 0 {
						g.log.Warn("gossip subscriber too slow, dropped oldest events", "dropped_total", s.dropped)
					}
				default:
				}
				continue
			}
			break
		}
	}
}

// UpdateMeta replaces this member's metadata (m.ID must stay the same) and
// waits until the change has been gossiped once, or ctx is done; the new
// metadata is in effect locally either way and keeps spreading. Incarnation
// grows by one. Returns ErrMetaTooLarge, ErrNotOpen, or a ctx error.
func (g *Gossip) UpdateMeta(ctx context.Context, m Meta) error {
	g.lifeMu.Lock()
	if lifecycle(g.state.Load()) != stateOpen {
		g.lifeMu.Unlock()
		return ErrNotOpen
	}
	if m.ID != g.cfg.Meta.ID {
		g.lifeMu.Unlock()
		return fmt.Errorf("gossip: UpdateMeta: ID %q cannot change to %q", g.cfg.Meta.ID, m.ID)
	}
	b, err := encodeMeta(m, g.incarnation+1)
	if err != nil {
		g.lifeMu.Unlock()
		return fmt.Errorf("gossip: UpdateMeta: %w", err)
	}
	g.incarnation++
	g.metaBytes.Store(&b)
	ml := g.ml
	g.lifeMu.Unlock()

	timeout := updateTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- ml.UpdateNode(timeout) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("gossip: UpdateMeta: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leave tells the cluster that this member is leaving on purpose, and waits
// up to timeout (0 = no bound) for that broadcast to go out; the others then
// report EventLeave rather than EventFail. The member keeps running until
// Close. Calling it again is a no-op. Returns ErrNotOpen if not open.
func (g *Gossip) Leave(timeout time.Duration) error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	if lifecycle(g.state.Load()) != stateOpen {
		return ErrNotOpen
	}
	return g.leaveLocked(timeout)
}

func (g *Gossip) leaveLocked(timeout time.Duration) error {
	if g.left {
		return nil
	}
	g.left = true
	if err := g.ml.Leave(timeout); err != nil {
		return fmt.Errorf("gossip: leave: %w", err)
	}
	g.log.Info("gossip left cluster")
	return nil
}

// Close leaves the cluster (bounded to 2 s; skipped if another process holds
// our ID, so that its entry is not marked left), shuts memberlist down,
// stops the background join and closes all subscriber channels. It is safe
// to call twice and before Open.
func (g *Gossip) Close() error {
	return g.close(true)
}

// close stops the member; leave=false simulates a crash (tests).
func (g *Gossip) close(leave bool) error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	var errs []error
	switch lifecycle(g.state.Load()) {
	case stateClosed:
		return nil
	case stateOpen:
		g.cancel()
		if leave && !g.conflicted.Load() {
			if err := g.leaveLocked(closeLeaveTimeout); err != nil {
				g.log.Warn("gossip leave on close", "err", err)
			}
		}
		if err := g.ml.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: shutdown: %w", err))
		}
	case stateNew:
		close(g.joinDone)
	}
	g.mu.Lock()
	g.state.Store(int32(stateClosed))
	for s := range g.subs {
		close(s.ch)
	}
	clear(g.subs)
	g.mu.Unlock()
	g.wg.Wait()
	return errors.Join(errs...)
}

// observe records a memberlist notification and publishes it. Called from
// memberlist with its node lock held: it must not call into memberlist.
func (g *Gossip) observe(n *memberlist.Node, st Status, typ EventType) {
	m := g.toMember(n, st)
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.members[n.Name]; ok && typ == EventJoin && n.Name != g.cfg.Meta.ID &&
		(old.m.Status == StatusDead || old.m.Status == StatusLeft) {
		select {
		case g.returned <- m.GossipAddr:
		default: // the loop is busy with others; its ticker catches up
		}
	}
	g.members[n.Name] = entry{m: m, since: time.Now()}
	g.publishLocked(Event{Type: typ, Member: cloneMember(m)})
	lvl := slog.LevelInfo
	if typ == EventUpdate {
		lvl = slog.LevelDebug
	}
	g.log.Log(context.Background(), lvl, "gossip member "+typ.String(), "member", n.Name, "addr", m.GossipAddr,
		"status", st, "roles", m.Meta.Roles, "incarnation", m.Incarnation)
}

func (g *Gossip) toMember(n *memberlist.Node, st Status) Member {
	meta, inc, err := decodeMeta(n.Meta)
	if err != nil {
		g.log.Warn("gossip member has undecodable metadata", "member", n.Name, "err", err)
		meta = Meta{ID: n.Name}
	}
	if meta.ID != n.Name {
		g.log.Warn("gossip member metadata ID differs from its name; using the name", "member", n.Name, "meta_id", meta.ID)
		meta.ID = n.Name
	}
	return Member{
		Meta:        meta,
		GossipAddr:  net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		Status:      st,
		Incarnation: inc,
	}
}

// delegate implements memberlist's Delegate, EventDelegate and
// ConflictDelegate on a Gossip, keeping those methods off its public API.
type delegate Gossip

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

func (d *delegate) NodeMeta(limit int) []byte {
	b := *(*Gossip)(d).metaBytes.Load()
	if len(b) > limit { // cannot happen: encodeMeta checks MaxMetaSize
		return nil
	}
	return b
}

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

func (d *delegate) NotifyJoin(n *memberlist.Node) {
	(*Gossip)(d).observe(n, StatusAlive, EventJoin)
}

func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	(*Gossip)(d).observe(n, StatusAlive, EventUpdate)
}

func (d *delegate) NotifyLeave(n *memberlist.Node) {
	if nodeStateOf(n) == memberlist.StateLeft {
		(*Gossip)(d).observe(n, StatusLeft, EventLeave)
		return
	}
	(*Gossip)(d).observe(n, StatusDead, EventFail)
}

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	g := (*Gossip)(d)
	if existing.Name == g.cfg.Meta.ID {
		g.selfConflicts.Add(1)
	}
	st := StatusAlive
	switch nodeStateOf(existing) {
	case memberlist.StateSuspect:
		st = StatusSuspect
	case memberlist.StateDead:
		st = StatusDead
	case memberlist.StateLeft:
		st = StatusLeft
	}
	m := g.toMember(other, st)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	key := existing.Name + "@" + m.GossipAddr
	if last, ok := g.conflictSeen[key]; ok && now.Sub(last) < conflictQuiet {
		return
	}
	for k, t := range g.conflictSeen {
		if now.Sub(t) >= conflictQuiet {
			delete(g.conflictSeen, k)
		}
	}
	g.conflictSeen[key] = now
	g.log.Error("gossip node ID conflict: another process claims this ID from a different address; it is ignored",
		"member", existing.Name, "holder_addr", net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port))),
		"claimant_addr", m.GossipAddr)
	g.publishLocked(Event{Type: EventConflict, Member: m})
}
