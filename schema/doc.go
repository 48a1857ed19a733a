// Package schema is raftps's metadata keyspace: every key that raftps
// writes into its own Raft store, the parsers of those keys, and the record
// types stored under them. Nobody else spells "/jobs/" (etcd's
// server/storage/schema; PaddlePaddle's go/master/etcd_client.go constants).
//
// The keyspace:
//
//	/nodes/<id>                      NodeRecord (JSON), written by the master from gossip
//	/learners/<id>                   the Raft address of a learner (member add --learner) until promoted
//	/jobs/<job>/ps/<slot>            SlotRecord (JSON): the pserver that holds a slot, under its lease
//	/jobs/<job>/trainers/<id>        TrainerRecord (JSON): a registered trainer, under its node's lease
//	/jobs/<job>/checkpoints/<slot>   pb.CheckpointPointer (protojson): a slot's newest committed checkpoint
//	/jobs/<job>/restores/<slot>      pb.RestoreRecord (protojson): a slot's latest restore
//	/jobs/<job>/handovers/<slot>     HandoverRecord (JSON): the last early revoke of a slot holder's lease
//	/jobs/<job>/replicas/<slot>      ReplicaRecord (JSON): a replicated slot's primary and in-sync backups; mod_revision = epoch
//	/jobs/<job>/rollback             Rollback (JSON): the version a sync job went back to
//
// Job specs, task queues and events are not keys: they live in the FSM's
// job queue (fsm/jobq) and are reached through the Master API.
//
// Checkpoint versions encode a sync trajectory and a step:
// version = epoch*EpochStride + step (VersionEpoch, VersionStep).
//
// Usage:
//
//	key := schema.SlotKey("mnist", 0)               // "/jobs/mnist/ps/0"
//	rec, err := schema.ParseSlotRecord(kv.Value)
//	start, end := schema.PrefixRange(schema.SlotPrefix("mnist"))
//	job, kind, id, ok := schema.ParseJobKey(string(kv.Key)) // "mnist", schema.KindSlot, "0", true
//
// The package is a leaf: it imports only the standard library and the
// generated API, so every layer may use it.
package schema
