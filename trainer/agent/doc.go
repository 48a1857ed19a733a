// Package agent runs the trainer role of a node: for every running job whose
// model raftps implements (not jobspec.ModelExternal, which its own trainers
// serve) and whose dataset is on this node it registers a trainer under the node's lease
// (schema.TrainerKey, a schema.TrainerRecord) and runs a trainer.Trainer
// against the master and the job's pservers until the job ends. It reaches
// the cluster through client interfaces only: Meta (the store's roles,
// raftstore/roles: the node passes its own *raftstore.Store; its lease
// calls keep a concurrency.Session) and MasterAPI.
//
//	a := agent.New(agent.Config{NodeID: "n1", Addr: grpcAddr}, meta, masterSvc)
//	go a.Run(ctx)
//
// A trainer is started only if its model and gradients (TrainerBytes) fit
// in what Config.MemoryBudget has left after the node's other trainers;
// otherwise a TRAINER_NOT_STARTED job event says why (budget.go).
//
// A trainer holds no state that must survive it: if the node dies its lease
// expires (or the master revokes it when gossip declares the node dead), its
// pending tasks are requeued and the pservers' sync steps go on without it.
package agent
