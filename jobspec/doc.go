// Package jobspec holds the rules of a job spec (pb.JobSpec) that every
// layer shares: the one validation (ValidateSpec), the bounds of every
// field (the Max constants) and the defaults it fills, the parameter and
// optimizer-state bytes a job takes (StateBytes), and Need, what a job asks
// of the nodes' memory budgets (master's admission and both agents'
// budgets use it, so the three agree).
//
//	spec, err := jobspec.ValidateSpec(in) // a copy with defaults; err wraps errs.ErrInvalid naming the field
//	need, _ := jobspec.Need(spec)         // need.State, need.Slot (per pserver slot), need.Trainer
//
// The bounds are constants, not flags: the state machine (fsm/jobq's
// Submit) validates inside Apply, so every replica must accept or refuse
// the same spec. Per-node memory budgets are the node's business;
// MaxJobBytes is the cluster-wide cap no submission passes.
//
// It is a leaf: it imports only the generated API, internal/shape and the
// sentinels, so the master, the agents, the dashboard and clients use it
// without importing the state machine. Its functions are pure and safe for
// concurrent use.
package jobspec
