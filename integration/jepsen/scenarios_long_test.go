//go:build jepsen_long

package jepsen

import (
	"context"
	"crypto/md5"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/schema"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The scenarios in this file run only in the long suite (`make jepsen`
// builds with -tags jepsen_long): each trains a job for minutes under
// faults, too long for `make test`. They are not built otherwise, so no
// run reports them skipped.

// TestJepsenKeepMaxOne runs a sync job of 3 slots with keep_max 1 and a
// checkpoint every 5 steps while the nemesis kills the pserver of slot 0,
// a random node and the pserver again (-jepsen.long only). Checks:
// CheckCompleteVersions over every committed pointer in commit order (a
// globally complete version always exists); a sampler that every second
// reads all pointers at one revision, takes the newest version every slot
// names, and fetches each slot's manifest of it from every node (a kept
// version's replicas are not in the pointer): a manifest that every node
// answers NotFound for while a later read still names that version is a
// violation (a node down makes the moment "unreachable"), and a fetched manifest
// must match the pointer's MD5; CheckTraining (every restore matches its
// pointer's MD5; tasks exactly once per pass).
func TestJepsenKeepMaxOne(t *testing.T) {
	sc := newScenario(t, "keep-max-1", 3, nil)
	job := "keep-max-1"
	sc.submit(job, "--pservers", "3", "--mode", "sync", "--passes", "500", "--keep-max", "1", "--checkpoint-steps", "5", "--replicas", "2")
	t.Cleanup(func() { sc.cancelJob(job) })
	bal, err := DialBalanced(sc.addrs, sc.creds...)
	if err != nil {
		t.Fatal(err)
	}
	defer bal.Close()
	follow := make(chan TrainingHistory, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		th, _ := FollowJob(ctx, pb.NewMasterClient(bal), pb.NewWatchClient(bal), job)
		follow <- th
	}()
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan Result, 1)
	go func() { sampled <- sc.sampleManifests(sampleCtx, job, 3) }()

	time.Sleep(20 * time.Second) // checkpoints under way
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	nem := NewNemesis(NemesisConfig{Faults: []string{FaultKillPServer, FaultKillRandom, FaultKillPServer}, Hold: 4 * time.Second, Quiet: 12 * time.Second, Seed: seed}, sc.hs, sc.conns, sc.h)
	faults := nem.Run(context.Background())
	for _, f := range faults {
		sc.sum.Faults[f.Type]++
	}
	sc.sum.FaultList = faults
	time.Sleep(20 * time.Second) // recover and checkpoint again
	stopSampling()
	sc.cancelJob(job)
	th := <-follow
	samp := <-sampled
	complete := CheckCompleteVersions(th.Pointers, 3)
	tr := CheckTraining(th)
	if th.Final != nil {
		tr.Notes = append(tr.Notes, fmt.Sprintf("job %s: state %s, pass %d, done %d, requeued %d, restores %d, pointers seen %d",
			job, th.Final.GetState(), th.Final.GetPass(), th.Final.GetDone(), th.Final.GetRequeued(), len(th.Restores), len(th.Pointers)))
	}
	if b, err := json.MarshalIndent(th, "", " "); err == nil {
		_ = os.WriteFile(filepath.Join(sc.out, "training.json"), b, 0o644)
	}
	sc.sum.Ops["job-events"] = len(th.Events)
	sc.sum.Ops["pointers"] = len(th.Pointers)
	sc.finish(complete, samp, tr)
}

// TestJepsenLeaderClockStep steps the leader's wall clock (the test-only
// raftstore.TestClockOffsetEnv file of a binary built with
// raftstore.TestClockTag: the wall time stamped into the entries it
// proposes) while a sync training job, the register workload and the
// lease workload run (-jepsen.long only): the leader +1h, back by 1h, then
// every follower +1h and the leader paused 2 s (a failover to a node whose
// clock is an hour ahead, issue 12 item 9), then the new leader back by
// 1h. No task may be requeued for a timeout or fail (CheckNoTimeouts: the
// pause is far below the 10 s task timeout floor), no lease key may vanish
// while kept alive nor outlive its bound (CheckLeases), the registers must
// be linearizable and the job's events whole (CheckTraining).
func TestJepsenLeaderClockStep(t *testing.T) {
	if testing.Short() {
		t.Skip("jepsen: -short; skipped (the scenario runs a real cluster)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("jepsen: needs root to create network namespaces (CI runs as root; run the suite as root, or with -short to leave it out)")
	}
	requireTestClock(t, raftpsBinary(t))
	clocks := t.TempDir()
	clockFile := func(h *Host) string { return filepath.Join(clocks, h.Name) }
	sc := newScenario(t, "clock-step", 3, func(h *Host) []string {
		_ = os.WriteFile(clockFile(h), []byte("0s"), 0o644)
		h.Env = append(h.Env, raftstore.TestClockOffsetEnv+"="+clockFile(h))
		return nil
	})
	job := "clock-step"
	sc.submit(job, "--pservers", "2", "--mode", "sync", "--passes", "500", "--checkpoint-steps", "50")
	t.Cleanup(func() { sc.cancelJob(job) })
	bal, err := DialBalanced(sc.addrs, sc.creds...)
	if err != nil {
		t.Fatal(err)
	}
	defer bal.Close()
	follow := make(chan TrainingHistory, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		th, _ := FollowJob(ctx, pb.NewMasterClient(bal), pb.NewWatchClient(bal), job)
		follow <- th
	}()

	wctx, wcancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer wcancel()
	var (
		wg        sync.WaitGroup
		leaseRecs []LeaseRecord
	)
	wg.Add(2)
	go func() { defer wg.Done(); RunRegisters(wctx, RegisterConfig{Clients: 4, Keys: 3}, sc.conns, sc.h) }()
	go func() { defer wg.Done(); leaseRecs = RunLeases(wctx, LeaseConfig{TTL: 4}, sc.conns, sc.h) }()

	var faults []Fault
	step := func(h *Host, off, why string) {
		f := Fault{Type: "clock-step", Target: h.Name, Start: sc.h.Now(), Detail: fmt.Sprintf("wall clock offset %s (%s)", off, why)}
		if err := os.WriteFile(clockFile(h), []byte(off), 0o644); err != nil {
			f.Err = err.Error()
		}
		time.Sleep(10 * time.Second)
		f.End = sc.h.Now()
		sc.h.Notef("nemesis: %s on %s: %s", f.Type, f.Target, f.Detail)
		faults = append(faults, f)
	}
	leaderHost := func() *Host {
		if id := sc.conns.Leader(context.Background(), 2*time.Second); id != "" {
			return sc.hs.Host(id)
		}
		return nil
	}
	time.Sleep(12 * time.Second)
	l1 := leaderHost()
	if l1 == nil {
		t.Fatal("jepsen: no leader")
	}
	step(l1, "1h", "leader +1h")
	step(l1, "0s", "leader back by 1h")
	for _, n := range sc.hs.Nodes {
		if n != l1 {
			_ = os.WriteFile(clockFile(n), []byte("1h"), 0o644)
		}
	}
	pf := Fault{Type: FaultPauseLeader, Target: l1.Name, Start: sc.h.Now(), Detail: "every follower's clock +1h: the new leader's clock is ahead"}
	if err := l1.Pause(); err != nil {
		pf.Err = err.Error()
	}
	time.Sleep(2 * time.Second)
	if err := l1.Resume(); err != nil && pf.Err == "" {
		pf.Err = err.Error()
	}
	pf.End = sc.h.Now()
	faults = append(faults, pf)
	time.Sleep(5 * time.Second)
	if l2 := leaderHost(); l2 != nil && l2 != l1 {
		step(l2, "0s", "the new leader (ahead by 1h) back by 1h")
	} else {
		sc.h.Notef("no leader change after the pause (leader %v)", l2)
		time.Sleep(10 * time.Second)
	}
	wg.Wait()
	for _, f := range faults {
		sc.fault(f)
	}
	sc.cancelJob(job)
	th := <-follow

	ops := sc.h.RegisterOps()
	regRes, _ := CheckRegisters(ops, time.Minute)
	terms := TermChanges(ops, leaseRecs)
	leaseRes := CheckLeases(leaseRecs, LeaseBounds{
		ElectionTimeout: 500 * time.Millisecond, Slack: 2 * time.Second, Margin: 100 * time.Millisecond,
		Faults: append(append([]Fault(nil), faults...), terms...),
	})
	leaseRes.Stats["term-changes"] = len(terms)
	tr := CheckTraining(th)
	if th.Final != nil {
		tr.Notes = append(tr.Notes, fmt.Sprintf("job %s: state %s, pass %d, done %d, requeued %d", job, th.Final.GetState(), th.Final.GetPass(), th.Final.GetDone(), th.Final.GetRequeued()))
	}
	sc.sum.Ops["register"] = len(ops)
	sc.sum.Ops["lease"] = len(leaseRecs)
	sc.sum.Ops["job-events"] = len(th.Events)
	sc.finish(regRes, leaseRes, tr, CheckNoTimeouts(th.Events))
}

// sampleManifests is TestJepsenKeepMaxOne's sampler (see there).
func (sc *scenario) sampleManifests(ctx context.Context, job string, slots int32) Result {
	r := newResult("complete-manifests")
	readPointers := func() (map[int32]*pb.CheckpointPointer, error) {
		key, end := schema.PrefixRange(schema.CheckpointPrefix(job))
		var lastErr error
		for _, c := range sc.conns {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := c.KV.Range(cctx, &pb.RangeRequest{Key: key, RangeEnd: end})
			cancel()
			if err != nil {
				lastErr = err
				continue
			}
			out := map[int32]*pb.CheckpointPointer{}
			for _, kv := range resp.Kvs {
				_, kind, id, ok := schema.ParseJobKey(string(kv.Key))
				if !ok || kind != schema.KindCheckpoint {
					continue
				}
				slot, serr := schema.ParseSlot(id)
				p, perr := schema.ParsePointer(kv.Value)
				if serr == nil && perr == nil {
					out[slot] = p
				}
			}
			return out, nil
		}
		return nil, lastErr
	}
	names := func(p *pb.CheckpointPointer, v int64) (md5sum string, ok bool) {
		if p.GetVersion() == v {
			return p.GetMd5(), true
		}
		for i, k := range p.GetKeptVersions() {
			if k == v && i < len(p.GetKeptMd5S()) {
				return p.GetKeptMd5S()[i], true
			}
		}
		return "", false
	}
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Second)
		ptrs, err := readPointers()
		if err != nil || int32(len(ptrs)) < slots {
			continue
		}
		r.Stats["moments"]++
		var newest int64 = -1
		for _, v := range append([]int64{ptrs[0].GetVersion()}, ptrs[0].GetKeptVersions()...) {
			all := true
			for s := int32(1); s < slots; s++ {
				if _, ok := names(ptrs[s], v); !ok {
					all = false
				}
			}
			if all && v > newest {
				newest = v
			}
		}
		if newest < 0 {
			r.violate("at %s: no version named by every slot's pointer", fmtNs(sc.h.Now()))
			continue
		}
		for s := int32(0); s < slots; s++ {
			want, _ := names(ptrs[s], newest)
			// A kept version's replicas are not in the pointer (replicas
			// names the current version's), so every node is asked.
			found, notFound := false, 0
			for _, c := range sc.conns {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := pb.NewCheckpointStoreClient(c.Conn).GetManifest(cctx, &pb.GetManifestRequest{Key: checkpoint.ManifestKey(job, newest, s)})
				cancel()
				if err == nil {
					sum := md5.Sum(resp.GetManifest())
					if got := hex.EncodeToString(sum[:]); got != want {
						r.violate("slot %d version %d on %s: manifest md5 %s, pointer says %s", s, newest, c.Name, got, want)
					}
					found = true
					break
				}
				if status.Code(err) == codes.NotFound {
					notFound++
				}
			}
			switch {
			case found:
				r.Stats["manifests"]++
			case notFound == len(sc.conns):
				// Missing on every node: a violation only if the pointer
				// still names the version afterwards (a newer complete
				// version may have retired it meanwhile).
				if later, err := readPointers(); err == nil {
					if _, still := names(later[s], newest); still {
						r.violate("slot %d: version %d is named by its pointer but its manifest is on no node", s, newest)
					} else {
						r.Stats["retired-meanwhile"]++
					}
				}
			default:
				r.Stats["unreachable"]++
			}
		}
	}
	if r.Stats["manifests"] == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no manifest fetched")
	}
	return r
}

// requireTestClock fails t unless bin was built with
// raftstore.TestClockTag (read from the build settings Go stamps into the
// binary): without it a node ignores raftstore.TestClockOffsetEnv and a
// clock-step scenario would step nothing.
func requireTestClock(t *testing.T, bin string) {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("jepsen: read the build settings of %s: %v", bin, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), raftstore.TestClockTag) {
			return
		}
	}
	t.Fatalf("jepsen: %s was built without -tags %s, so its nodes ignore %s; build it with the tag (or leave -jepsen.bin out)",
		bin, raftstore.TestClockTag, raftstore.TestClockOffsetEnv)
}
