package jobq_test

import (
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm/jobq"
)

// A job of 5 records in tasks of 2 records, one pass: two trainers take
// tasks, one dies and its task is requeued, the other finishes everything.
// now is the leader's clock, stamped into each Raft entry.
func Example() {
	q := jobq.New()
	now := int64(1_700_000_000e9)
	_, err := q.Submit(now, &pb.SubmitJobRequest{Spec: &pb.JobSpec{
		Name:           "mnist",
		Model:          &pb.ModelSpec{Name: "softmax"},
		Dataset:        &pb.DatasetSpec{Path: "/data/fashion-mnist", Records: 5},
		RecordsPerTask: 2,
		Passes:         1,
		BatchSize:      1,
		Optimizer:      &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		NumPservers:    1,
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	get := func(trainer string) *pb.GetTaskResponse {
		r, _ := q.GetTask(now, &pb.GetTaskRequest{Job: "mnist", Trainer: trainer})
		return r
	}
	a := get("a").Task
	b := get("b").Task
	fmt.Printf("a got task %d [%d, %d) epoch %d; b got task %d epoch %d\n", a.Id, a.Begin, a.End, a.Epoch, b.Id, b.Epoch)

	now += 1e9
	r, _ := q.RequeueTrainer(now, &pb.RequeueTrainerRequest{Job: "mnist", Trainer: "a", Reason: "gossip: dead"})
	fmt.Println("requeued:", r.Requeued)
	late, _ := q.TaskFinished(now, &pb.TaskFinishedRequest{Job: "mnist", TaskId: a.Id, Epoch: a.Epoch})
	fmt.Println("a's late finish accepted:", late.Accepted)

	q.TaskFinished(now, &pb.TaskFinishedRequest{Job: "mnist", TaskId: b.Id, Epoch: b.Epoch, Metrics: &pb.TaskMetrics{Loss: 0.5, Examples: 2}})
	for {
		r := get("b")
		if r.Result != pb.GetTaskResponse_TASK {
			fmt.Println("b:", r.Result)
			break
		}
		fmt.Printf("b got task %d epoch %d\n", r.Task.Id, r.Task.Epoch)
		q.TaskFinished(now, &pb.TaskFinishedRequest{Job: "mnist", TaskId: r.Task.Id, Epoch: r.Task.Epoch, Metrics: &pb.TaskMetrics{Loss: 0.5, Examples: 2}})
	}
	st, _ := q.Job("mnist")
	fmt.Printf("%v: done %d of %d, train loss %.2f\n", st.State, st.Done, st.TotalTasks, st.Metrics[0].TrainLoss)
	evs, _ := q.Events("mnist", 1, 0)
	for _, e := range evs {
		fmt.Println(e.Seq, e.Type, e.TaskId)
	}
	// Output:
	// a got task 0 [0, 2) epoch 1; b got task 1 epoch 2
	// requeued: 1
	// a's late finish accepted: false
	// b got task 2 epoch 3
	// b got task 0 epoch 4
	// b: JOB_OVER
	// JOB_SUCCEEDED: done 3 of 3, train loss 0.50
	// 1 JOB_SUBMITTED 0
	// 2 TASK_REQUEUED 0
	// 3 TRAINER_LEFT 0
	// 4 TASK_DONE 1
	// 5 TASK_DONE 2
	// 6 TASK_DONE 0
	// 7 PASS_ENDED 0
	// 8 JOB_ENDED 0
}
