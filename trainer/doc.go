// Package trainer is the stateless worker of a raftps job: it takes tasks
// from the master, trains on their records against the parameter servers,
// and reports back. Models live in trainer/model, data in trainer/dataset.
//
// See Trainer for the task loop and TrainLocal for the single-process
// baseline that uses the same model, data order and update rules without RPC.
package trainer
