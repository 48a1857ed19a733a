package jepsen

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// Verdict of a checker.
type Verdict string

const (
	VerdictOK        Verdict = "ok"
	VerdictViolation Verdict = "violation"
	// VerdictUnknown: the checker could not decide (Porcupine timed out, or
	// there was nothing to check). It does not fail the run.
	VerdictUnknown Verdict = "unknown"
)

// Result is what one checker found.
type Result struct {
	Checker    string         `json:"checker"`
	Verdict    Verdict        `json:"verdict"`
	Violations []string       `json:"violations,omitempty"`
	Stats      map[string]int `json:"stats,omitempty"`
	Notes      []string       `json:"notes,omitempty"`
}

// maxViolations bounds the violations a result lists.
const maxViolations = 50

func (r *Result) violate(format string, args ...any) {
	r.Verdict = VerdictViolation
	if len(r.Violations) < maxViolations {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

func newResult(name string) Result {
	return Result{Checker: name, Verdict: VerdictOK, Stats: map[string]int{}}
}

// CheckRegisters checks the register history for linearizability with
// Porcupine (partitioned by key, failed reads dropped, indeterminate writes
// open-ended). timeout bounds Porcupine (0: none). The returned info feeds
// porcupine.VisualizePath.
func CheckRegisters(ops []RegisterOp, timeout time.Duration) (Result, porcupine.LinearizationInfo) {
	res := newResult("linearizable-registers")
	for _, op := range ops {
		res.Stats["ops"]++
		res.Stats[string(op.Kind)+"-"+string(op.Status)]++
		if op.Kind == RegCAS && op.Status == StatusOK && op.OK {
			res.Stats["cas-succeeded"]++
		}
	}
	pops := PorcupineOps(ops)
	res.Stats["checked"] = len(pops)
	unobserved := 0
	for _, op := range ops {
		if op.Status == StatusInfo && op.Kind != RegRead {
			unobserved++
		}
	}
	for _, o := range pops {
		if o.Metadata.(RegisterOp).Status == StatusInfo {
			unobserved--
		}
	}
	res.Stats["info-unobserved-dropped"] = unobserved
	if len(pops) == 0 {
		res.Verdict = VerdictUnknown
		res.Notes = append(res.Notes, "no register operations to check")
		return res, porcupine.LinearizationInfo{}
	}
	res.Stats["keys"] = len(RegisterModel.Partition(pops))
	began := time.Now()
	cr, info := porcupine.CheckOperationsVerbose(RegisterModel, pops, timeout)
	res.Notes = append(res.Notes, fmt.Sprintf("porcupine: %s in %s", cr, time.Since(began).Round(time.Millisecond)))
	switch cr {
	case porcupine.Ok:
	case porcupine.Illegal:
		// Name the keys: re-check each key's partition on its own.
		var bad []string
		for _, part := range RegisterModel.Partition(pops) {
			if porcupine.CheckOperationsTimeout(RegisterModel, part, timeout) == porcupine.Illegal {
				bad = append(bad, part[0].Metadata.(RegisterOp).Key)
			}
		}
		if len(bad) > 8 {
			bad = append(bad[:8:8], fmt.Sprintf("... (%d keys in all)", len(bad)))
		}
		res.violate("history is not linearizable on key(s) %s (see linearizability.html for the longest linearizable prefix)", strings.Join(bad, ", "))
	default:
		res.Verdict = VerdictUnknown
		res.Notes = append(res.Notes, fmt.Sprintf("porcupine gave %s within %s", cr, timeout))
	}
	return res, info
}

// CheckWatches checks that each watcher's events form an ordered, gap-free,
// duplicate-free run of the committed history:
//   - within a watcher, mod_revisions never decrease and no (revision, key)
//     appears twice;
//   - every put acknowledged with revision R, R inside a watcher's covered
//     range [StartRevision, EndRevision], is among its events with its value;
//   - every event any watcher saw at a revision inside another watcher's
//     covered range is among that watcher's events, with the same content;
//   - no event is beyond finalRevision (a final linearizable read's revision;
//     0 skips this).
func CheckWatches(runs []WatcherRun, acked []AckedPut, finalRevision int64) Result {
	res := newResult("watch")
	type rk struct {
		rev int64
		key string
	}
	union := map[rk]WatchEvent{}
	perWatcher := make([]map[rk]WatchEvent, len(runs))
	for i, run := range runs {
		res.Stats["events"] += len(run.Events)
		res.Stats["resumes"] += run.Resumes
		if run.Compacted {
			res.Notes = append(res.Notes, fmt.Sprintf("watcher %d hit a compaction", run.ID))
		}
		seen := map[rk]WatchEvent{}
		var last int64
		for j, ev := range run.Events {
			k := rk{ev.ModRevision, ev.Key}
			if _, dup := seen[k]; dup {
				res.violate("watcher %d: duplicate event %s %q at revision %d (event #%d)", run.ID, ev.Type, ev.Key, ev.ModRevision, j)
			}
			if ev.ModRevision < last {
				res.violate("watcher %d: revision went back from %d to %d (event #%d)", run.ID, last, ev.ModRevision, j)
			}
			if ev.ModRevision < run.StartRevision {
				res.violate("watcher %d: event at revision %d before its start revision %d", run.ID, ev.ModRevision, run.StartRevision)
			}
			if finalRevision > 0 && ev.ModRevision > finalRevision {
				res.violate("watcher %d: event at revision %d beyond the final revision %d", run.ID, ev.ModRevision, finalRevision)
			}
			last = max(last, ev.ModRevision)
			seen[k] = ev
			if u, ok := union[k]; ok && (u.Type != ev.Type || u.Value != ev.Value) {
				res.violate("watchers %d and %d disagree at revision %d key %q: %s %q vs %s %q",
					u.Watcher, ev.Watcher, ev.ModRevision, ev.Key, u.Type, u.Value, ev.Type, ev.Value)
			} else if !ok {
				union[k] = ev
			}
		}
		perWatcher[i] = seen
	}
	covers := func(run WatcherRun, rev int64) bool {
		return rev >= run.StartRevision && rev <= run.EndRevision
	}
	for i, run := range runs {
		for _, a := range acked {
			if !covers(run, a.Revision) {
				continue
			}
			res.Stats["acked-checked"]++
			ev, ok := perWatcher[i][rk{a.Revision, a.Key}]
			switch {
			case !ok:
				res.violate("watcher %d: gap: acknowledged put %q=%q at revision %d missing (covered %d..%d)",
					run.ID, a.Key, a.Value, a.Revision, run.StartRevision, run.EndRevision)
			case ev.Type != "put" || ev.Value != a.Value:
				res.violate("watcher %d: revision %d key %q: saw %s %q, acknowledged put %q",
					run.ID, a.Revision, a.Key, ev.Type, ev.Value, a.Value)
			}
		}
		for k, ev := range union {
			if !covers(run, k.rev) {
				continue
			}
			if _, ok := perWatcher[i][k]; !ok {
				res.violate("watcher %d: gap: %s %q at revision %d (seen by watcher %d) missing (covered %d..%d)",
					run.ID, ev.Type, ev.Key, k.rev, ev.Watcher, run.StartRevision, run.EndRevision)
			}
		}
	}
	if len(runs) == 0 {
		res.Verdict = VerdictUnknown
		res.Notes = append(res.Notes, "no watchers")
	}
	return res
}

// LeaseBounds are the times the lease checker allows.
type LeaseBounds struct {
	// ElectionTimeout of the cluster (raftps: 500ms).
	ElectionTimeout time.Duration
	// Slack added to TTL + election timeout before an abandoned lease's keys
	// must be gone (scheduling, a fault in progress).
	Slack time.Duration
	// Margin subtracted from a keepalive's promise before a vanished key is a
	// violation (clock and scheduling noise).
	Margin time.Duration
	// Faults of the run: a new leader extends every lease by its TTL, so an
	// abandoned lease may live until TTL after a fault that overlaps its
	// expiry window ends.
	Faults []Fault
}

// CheckLeases checks the lease workload's records:
//   - kept alive: a read that returned before the lease's promise ran out
//     (a keepalive or grant answered before the read's call, sent at s with
//     TTL T: promise s+T-margin) lists every key put under that lease and
//     acknowledged before the read's call;
//   - abandoned: after the expirer's "stop" at time t (last keepalive sent at
//     s with TTL T; a keepalive that failed or timed out may have renewed
//     the lease up to its return r, so s+T is at least r+T), a read that
//     starts after the deadline max(t, s+T) + election timeout + slack
//     lists none of that lease's keys; a fault that
//     overlaps [t, deadline] pushes the deadline to its end + T + election
//     timeout + slack (a new leader extends every lease by its TTL).
func CheckLeases(recs []LeaseRecord, b LeaseBounds) Result {
	res := newResult("lease")
	type promise struct{ sent, answered, until int64 }
	proms := map[int64][]promise{} // lease -> promises in answer order
	puts := map[int64][]LeaseRecord{}
	stops := map[int64]LeaseRecord{}
	ttls := map[int64]int64{}
	var reads []LeaseRecord
	// A keepalive that failed or timed out is indeterminate: it may have
	// renewed the lease at any moment up to its return.
	maybeRenewed := map[int64]int64{} // lease -> latest such return
	for _, r := range recs {
		res.Stats[r.Role+"-"+r.Kind+"-"+string(r.Status)]++
		if r.Status != StatusOK {
			if r.Kind == "keepalive" {
				maybeRenewed[r.Lease] = max(maybeRenewed[r.Lease], r.Return)
			}
			continue
		}
		switch r.Kind {
		case "grant", "keepalive":
			if r.Kind == "grant" {
				ttls[r.Lease] = r.TTL
			}
			if r.TTL > 0 {
				proms[r.Lease] = append(proms[r.Lease], promise{r.Call, r.Return, r.Call + int64(time.Duration(r.TTL)*time.Second) - int64(b.Margin)})
			}
		case "put":
			puts[r.Lease] = append(puts[r.Lease], r)
		case "stop":
			stops[r.Lease] = r
		case "read":
			reads = append(reads, r)
		}
	}
	for _, rd := range reads {
		present := map[string]bool{}
		for _, k := range rd.Keys {
			present[k] = true
		}
		for lease, ps := range puts {
			if ps[0].Role != rd.Role {
				continue
			}
			// Does a promise answered before the read cover its return?
			kept := false
			for _, p := range proms[lease] {
				if p.answered <= rd.Call && rd.Return <= p.until {
					kept = true
					break
				}
			}
			if st, ok := stops[lease]; ok && st.Call <= rd.Call {
				// After stop the promise still holds until it runs out; the
				// check above already bounds it by the last promise.
				_ = st
			}
			if !kept {
				continue
			}
			for _, p := range ps {
				if p.Return <= rd.Call && !present[p.Key] {
					res.violate("%s: key %q of lease %d vanished while kept alive (read %s..%s)",
						rd.Role, p.Key, lease, fmtNs(rd.Call), fmtNs(rd.Return))
					res.Stats["vanished"]++
				} else if p.Return <= rd.Call {
					res.Stats["kept-checked"]++
				}
			}
		}
	}
	for lease, st := range stops {
		var lastPromise int64
		for _, p := range proms[lease] {
			lastPromise = max(lastPromise, p.until+int64(b.Margin))
		}
		if at, ok := maybeRenewed[lease]; ok {
			lastPromise = max(lastPromise, at+int64(time.Duration(ttls[lease])*time.Second))
		}
		deadline := max(st.Call, lastPromise) + int64(b.ElectionTimeout+b.Slack)
		for changed := true; changed; {
			changed = false
			for _, f := range b.Faults {
				end := f.End
				if end == 0 {
					end = f.Start
				}
				if f.Start <= deadline && end >= st.Call {
					if d := end + int64(time.Duration(ttls[lease])*time.Second+b.ElectionTimeout+b.Slack); d > deadline {
						deadline, changed = d, true
					}
				}
			}
		}
		checked := false
		for _, rd := range reads {
			if rd.Role != st.Role || rd.Call <= deadline {
				continue
			}
			checked = true
			for _, k := range rd.Keys {
				if leaseOfKey(puts[lease], k) {
					res.violate("%s: key %q of abandoned lease %d still present at %s (deadline %s)",
						rd.Role, k, lease, fmtNs(rd.Call), fmtNs(deadline))
					res.Stats["outlived"]++
				}
			}
		}
		if checked {
			res.Stats["expiries-checked"]++
		} else {
			res.Stats["expiries-unchecked"]++
		}
	}
	if len(reads) == 0 {
		res.Verdict = VerdictUnknown
		res.Notes = append(res.Notes, "no successful lease reads")
	}
	return res
}

// TermChanges returns, for every Raft term after the first one seen, a
// pseudo-fault "term-change" at the first time a client got a response
// carrying it (an upper bound on when the election that started it
// happened). CheckLeases uses them like faults: a leader elected in a new
// term extends every lease by its TTL, fault or no fault (a leader that
// misses its leader lease under CPU starvation steps down by itself).
func TermChanges(ops []RegisterOp, recs []LeaseRecord) []Fault {
	first := map[uint64]int64{}
	see := func(term uint64, at int64) {
		if term == 0 {
			return
		}
		if t, ok := first[term]; !ok || at < t {
			first[term] = at
		}
	}
	for _, op := range ops {
		if op.Status == StatusOK {
			see(op.Term, op.Return)
		}
	}
	for _, r := range recs {
		if r.Status == StatusOK {
			see(r.Term, r.Return)
		}
	}
	var terms []uint64
	for t := range first {
		terms = append(terms, t)
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i] < terms[j] })
	var out []Fault
	for i, t := range terms {
		if i == 0 {
			continue
		}
		out = append(out, Fault{Type: "term-change", Target: fmt.Sprintf("term %d", t), Start: first[t], End: first[t]})
	}
	return out
}

func leaseOfKey(puts []LeaseRecord, key string) bool {
	for _, p := range puts {
		if p.Key == key {
			return true
		}
	}
	return false
}

func fmtNs(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }

// restoreMsg is the message of a pserver's PSERVER_RESTORED event on claim
// (pserver/agent): "slot %d on %s: version %d md5 %s from %s: %s".
var restoreMsg = regexp.MustCompile(`^slot (\d+) on (\S+): version (\d+) md5 (\S*) from (.*?): (.*)$`)

// RestoresFromEvents extracts the restore records of PSERVER_RESTORED events
// (rollback events of sync mode, "rolled back ...", are not restores of a
// slot's own checkpoint and are skipped).
func RestoresFromEvents(evs []*pb.JobEvent) []*pb.RestoreRecord {
	var out []*pb.RestoreRecord
	for _, ev := range evs {
		if ev.GetType() != pb.JobEvent_PSERVER_RESTORED {
			continue
		}
		m := restoreMsg.FindStringSubmatch(ev.GetMessage())
		if m == nil {
			continue
		}
		slot, _ := strconv.Atoi(m[1])
		version, _ := strconv.ParseInt(m[3], 10, 64)
		out = append(out, &pb.RestoreRecord{Slot: int32(slot), Version: version, Md5: m[4], Source: m[5], Reason: m[6], UnixNano: ev.GetUnixNano()})
	}
	return out
}

// CheckTraining checks a job's event stream and restores:
//   - event seqs are 1, 2, 3, ... without gaps or duplicates (a stream that
//     starts later than 1 is allowed if it was resumed);
//   - in each pass, every task is counted done exactly once (TASK_DONE grouped
//     by pass); a pass that ended (PASS_ENDED, or any pass before the last
//     seen when the job succeeded) has every task done or failed;
//   - every restore that names a checkpoint version (not an initializer
//     restore) names a committed pointer of that slot and version, with its MD5;
//   - a promoted backup's record (source PromotedSource, no MD5) restores
//     nothing and needs no pointer, but a slot's promotions
//     (PSERVER_PROMOTED events, and its record) never go back in version
//     without a restore of the slot between them (checkPromotions).
func CheckTraining(th TrainingHistory) Result {
	res := newResult("training")
	evs := append([]*pb.JobEvent(nil), th.Events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].GetSeq() < evs[j].GetSeq() })
	checkSeqs(&res, evs)
	res.Stats["events"] = len(evs)
	t := tallyTasks(evs, th)
	checkPasses(&res, t, expectedTasks(th, t.all))
	checkRestores(&res, th, evs)
	if len(evs) == 0 {
		res.Verdict = VerdictUnknown
		res.Notes = append(res.Notes, "no job events")
	}
	return res
}

// checkSeqs reports duplicate and missing seqs in evs (sorted by seq).
func checkSeqs(res *Result, evs []*pb.JobEvent) {
	for i := 1; i < len(evs); i++ {
		a, b := evs[i-1].GetSeq(), evs[i].GetSeq()
		if b == a {
			res.violate("job event seq %d appears twice", b)
		} else if b != a+1 {
			res.violate("job event seq gap: %d then %d", a, b)
		}
	}
}

// taskTally is what a job's events say of its tasks, per pass.
type taskTally struct {
	done    map[int32]map[int64]int  // pass -> task -> times counted done
	failed  map[int32]map[int64]bool // pass -> task -> failed
	ended   map[int32]bool           // passes with PASS_ENDED
	all     map[int64]bool           // every task id seen
	maxPass int32
	jobOK   bool // JOB_ENDED seen and the job succeeded
}

// tallyTasks counts evs' task events per pass.
func tallyTasks(evs []*pb.JobEvent, th TrainingHistory) taskTally {
	t := taskTally{done: map[int32]map[int64]int{}, failed: map[int32]map[int64]bool{}, ended: map[int32]bool{},
		all: map[int64]bool{}, maxPass: -1}
	done, failed, ended, all := t.done, t.failed, t.ended, t.all
	for _, ev := range evs {
		p := ev.GetPass()
		switch ev.GetType() {
		case pb.JobEvent_TASK_DONE:
			if done[p] == nil {
				done[p] = map[int64]int{}
			}
			done[p][ev.GetTaskId()]++
			all[ev.GetTaskId()] = true
			t.maxPass = max(t.maxPass, p)
		case pb.JobEvent_TASK_FAILED:
			if failed[p] == nil {
				failed[p] = map[int64]bool{}
			}
			failed[p][ev.GetTaskId()] = true
			all[ev.GetTaskId()] = true
		case pb.JobEvent_PASS_ENDED:
			ended[p] = true
			t.maxPass = max(t.maxPass, p)
		case pb.JobEvent_JOB_ENDED:
			if th.Final != nil && th.Final.GetState() == pb.JobState_JOB_SUCCEEDED {
				t.jobOK = true
			}
		}
	}
	return t
}

// expectedTasks is every task id of a pass: TasksPerPass dense ids (0- or
// 1-based, as seen), or without it every id seen.
func expectedTasks(th TrainingHistory, all map[int64]bool) []int64 {
	var expected []int64
	if th.TasksPerPass > 0 {
		// Task ids are dense; accept 0- or 1-based numbering from what was seen.
		base := int64(0)
		for id := range all {
			if id == th.TasksPerPass {
				base = 1
			}
		}
		for i := int64(0); i < th.TasksPerPass; i++ {
			expected = append(expected, base+i)
		}
	} else {
		for id := range all {
			expected = append(expected, id)
		}
		sort.Slice(expected, func(i, j int) bool { return expected[i] < expected[j] })
	}
	return expected
}

// checkPasses reports tasks counted done more than once in a pass, and
// passes that ended without every expected task done or failed.
func checkPasses(res *Result, t taskTally, expected []int64) {
	done, failed, ended, maxPass, jobOK := t.done, t.failed, t.ended, t.maxPass, t.jobOK
	passes := map[int32]bool{}
	for p := range done {
		passes[p] = true
	}
	for p := range ended {
		passes[p] = true
	}
	var plist []int32
	for p := range passes {
		plist = append(plist, p)
	}
	sort.Slice(plist, func(i, j int) bool { return plist[i] < plist[j] })
	for _, p := range plist {
		for id, n := range done[p] {
			res.Stats["tasks-done"]++
			if n > 1 {
				res.violate("pass %d: task %d counted done %d times", p, id, n)
			}
		}
		complete := ended[p] || (jobOK && p <= maxPass)
		if !complete {
			continue
		}
		res.Stats["passes-checked"]++
		var missing []string
		for _, id := range expected {
			if done[p][id] == 0 && !failed[p][id] {
				missing = append(missing, fmt.Sprint(id))
			}
		}
		if len(missing) > 0 {
			res.violate("pass %d ended without task(s) %s done or failed", p, strings.Join(missing, ","))
		}
	}
}

// checkRestores reports restores (recorded, or from PSERVER_RESTORED
// events) of a checkpoint version that no committed pointer of that slot
// names, or names with another MD5. A promoted backup's record
// (isPromotion) restores nothing and names no checkpoint: it is checked by
// checkPromotions instead.
func checkRestores(res *Result, th TrainingHistory, evs []*pb.JobEvent) {
	type sv struct {
		slot    int32
		version int64
	}
	ptr := map[sv]string{}
	for _, p := range th.Pointers {
		ptr[sv{p.Slot, p.Version}] = p.MD5
	}
	restores := append(append([]*pb.RestoreRecord(nil), th.Restores...), RestoresFromEvents(evs)...)
	checkPromotions(res, th.Restores, evs)
	for _, r := range restores {
		if strings.HasPrefix(r.GetReason(), "initializer") || r.GetVersion() == 0 || isPromotion(r) {
			continue
		}
		res.Stats["restores-checked"]++
		// md5 is the slot's manifest md5, or "slot:md5,..." when several old
		// slots contributed (restore with a different number of pservers).
		parts := map[int32]string{r.GetSlot(): r.GetMd5()}
		if strings.Contains(r.GetMd5(), ":") {
			parts = map[int32]string{}
			for _, p := range strings.Split(r.GetMd5(), ",") {
				s, m, _ := strings.Cut(p, ":")
				n, err := strconv.Atoi(s)
				if err != nil {
					res.violate("slot %d: restore md5 %q does not parse", r.GetSlot(), r.GetMd5())
					continue
				}
				parts[int32(n)] = m
			}
		}
		for slot, got := range parts {
			md5, ok := ptr[sv{slot, r.GetVersion()}]
			switch {
			case !ok:
				res.violate("slot %d restored version %d of slot %d that no committed pointer names", r.GetSlot(), r.GetVersion(), slot)
			case md5 != got:
				res.violate("slot %d version %d restored with md5 %s, pointer of slot %d says %s", r.GetSlot(), r.GetVersion(), got, slot, md5)
			}
		}
	}
}

// PromotedSource is the source of the restore record a promoted backup
// writes (pserver/agent's claimPromoted): it serves the state it holds,
// with no restore and no rollback.
const PromotedSource = "promoted backup"

// isPromotion reports whether r is a promoted backup's record: its
// source, and no checkpoint named (a record naming a manifest MD5 is a
// restore, whatever its source says, and is checked as one).
func isPromotion(r *pb.RestoreRecord) bool {
	return r.GetSource() == PromotedSource && r.GetMd5() == ""
}

// promotedMsg is the message of a PSERVER_PROMOTED event (pserver/agent):
// "slot %d on %s: backup promoted at epoch %d, version %d, step %d, in %v ...".
var promotedMsg = regexp.MustCompile(`^slot (\d+) on (\S+): backup promoted at epoch (\d+), version (\d+),`)

// checkPromotions reports promotions that went back: a promoted backup
// serves the state the deposed primary acknowledged, so a slot's version
// never decreases from one promotion to the next unless the slot was
// restored (PSERVER_RESTORED, a checkpoint restore or a rollback, the R = 1
// fallback) in between; and the slot's promoted record (recs, the latest
// per slot) names at least the version of the slot's last
// PSERVER_PROMOTED event when no restore followed that event. Stats:
// "promotions".
func checkPromotions(res *Result, recs []*pb.RestoreRecord, evs []*pb.JobEvent) {
	type last struct {
		version int64
		seq     int64
		ok      bool
	}
	bySlot := map[int32]*last{}
	for _, ev := range evs {
		switch ev.GetType() {
		case pb.JobEvent_PSERVER_RESTORED:
			// A restore or a rollback of the slot (or, "rolled back ...",
			// of every slot) starts over from a checkpoint.
			if m := restoreMsg.FindStringSubmatch(ev.GetMessage()); m != nil {
				slot, _ := strconv.Atoi(m[1])
				delete(bySlot, int32(slot))
			} else {
				bySlot = map[int32]*last{}
			}
		case pb.JobEvent_PSERVER_PROMOTED:
			m := promotedMsg.FindStringSubmatch(ev.GetMessage())
			if m == nil {
				res.violate("event %d: PSERVER_PROMOTED message %q does not parse", ev.GetSeq(), ev.GetMessage())
				continue
			}
			res.Stats["promotions"]++
			s, _ := strconv.Atoi(m[1])
			slot := int32(s)
			v, _ := strconv.ParseInt(m[4], 10, 64)
			if l := bySlot[slot]; l != nil && v < l.version {
				res.violate("slot %d promoted on %s at version %d (event %d), below version %d of its promotion at event %d with no restore between: a rollback",
					slot, m[2], v, ev.GetSeq(), l.version, l.seq)
			}
			bySlot[slot] = &last{version: v, seq: ev.GetSeq(), ok: true}
		}
	}
	for _, r := range recs {
		if !isPromotion(r) {
			continue
		}
		if l := bySlot[r.GetSlot()]; l != nil && r.GetVersion() < l.version {
			res.violate("slot %d: promoted record at version %d, below version %d of its promotion event %d: a rollback",
				r.GetSlot(), r.GetVersion(), l.version, l.seq)
		}
	}
}
