// Package psclient is the trainer's side of a job's parameter servers:
// Client splits gradients by vshard (pserver/wire's Layout) into one
// request per slot, calls the slots in parallel over gRPC with the tensor
// codec, retries with re-resolution while a slot answers Unavailable, and
// reassembles dense parameters into one flat []float32 per parameter. It
// imports pserver/wire, never the server (pserver): a trainer binary does
// not link Slot or Server (TestTrainerLinksNoServer keeps it so).
//
// Usage:
//
//	c, _ := psclient.NewClient(spec, trainerID, resolver)
//	params := c.NewParams()
//	for {
//		_ = c.Pull(ctx, params)
//		grads := model.Gradients(params, batch)
//		err := c.Push(ctx, &psclient.Grads{Dense: grads, Examples: n})
//		if errors.Is(err, wire.ErrStale) { continue } // re-pull
//	}
//	_ = c.LeaveStep(ctx) // out of data (sync mode)
//
// Client.PushPull(ctx, grads, params) is Push then Pull in one round trip
// per slot: the push asks for the slot's parameters in its reply
// (PushRequest.pull), read after the update (sync: after the step). The
// trainer uses it for every step of a task but the last.
//
// Retries: every Push carries a push id (PushRequest.push_id), the same on
// each retry; a slot applies a push id at most once (see pserver's doc,
// "Retries", for what a slot that moved remembers). A Resolver maps slots
// to addresses (/jobs/<job>/ps/); one that also implements SlotWatcher is
// followed as slots move. One that implements TargetResolver also gives
// each slot's replica epoch (the mod_revision of /jobs/<job>/replicas/<slot>),
// which every Pull and Push then carries (PullRequest.epoch,
// PushRequest.epoch): a primary serving another epoch, or deposed,
// refuses the call with wire.ErrEpoch (FailedPrecondition) before it reads
// or applies anything, and the Client resolves the slot again and retries,
// a push with the same push id (pserver/DESIGN.md, "Replicated slots"). The Client refuses pull responses carrying
// blocks of another slot.
//
// Detection (issue 34): with WithSuspectReporter, a call that fails at the
// transport (Transport: refused, Unavailable naming no slot sentinel, a
// deadline) is reported with its slot and address, one report in flight
// per slot; the trainer agent sends it to Master.ReportSuspect. Probe is
// the master's confirmation: a pull any live pserver answers at once.
//
// A Client is safe for concurrent use, but a trainer normally alternates
// Pull and Push. Errors wrap wire's sentinels (ErrStale, ErrInvalid,
// ErrNotHosted, ErrFenced, ErrEpoch) and keep their gRPC codes.
package psclient
