// Package trainertest provides in-memory fakes of the trainer's Master and
// PS interfaces and a synthetic Fashion-MNIST writer, to run the task loop
// end to end in tests without a cluster.
//
//	dir := t.TempDir()
//	err := trainertest.WriteSynthetic(dir, 2000, 500, 1)
//	spec := &pb.JobSpec{Name: "j", Model: ..., Dataset: &pb.DatasetSpec{Path: dir}, ...}
//	m := trainertest.NewMaster(spec)
//	ps, err := trainertest.NewPS(spec, 784, 10)
//	tr, err := trainer.New(trainer.Config{ID: "t1", Job: "j"}, m, ps)
//	err = tr.Run(ctx) // returns nil at JOB_OVER
//
// The fakes are safe for concurrent use by several trainers. Failure
// injection: Master.GetTaskHook, Master.FinishHook and PS.PushHook, PS.PullHook
// return an error for a call, e.g. status.Error(codes.Unavailable, ...).
package trainertest
