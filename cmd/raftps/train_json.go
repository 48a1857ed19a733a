package main

import "io"

// trainSummary is `raftps train -w json`: the end of the followed job.
type trainSummary struct {
	Job   string `json:"job"`
	State string `json:"state"` // a raftps.v1.JobState name: JOB_SUCCEEDED, JOB_FAILED, ...
	// ElapsedSeconds from submit to the job's end, as followed.
	ElapsedSeconds    float64 `json:"elapsed_seconds"`
	Examples          int64   `json:"examples"`
	ExamplesPerSecond float64 `json:"examples_per_second"`
	// FinalTestAccuracy of the last evaluated pass, in [0, 1]; null if none.
	FinalTestAccuracy *float64 `json:"final_test_accuracy"`
	// CheckpointVersion is the newest committed version (0: none), with
	// the md5 of each slot's manifest.
	CheckpointVersion int64    `json:"checkpoint_version"`
	CheckpointMD5s    []string `json:"checkpoint_md5s"`
	Message           string   `json:"message"`
}

func newTrainSummary(res *followResult) trainSummary {
	st := res.Status
	out := trainSummary{Job: st.GetName(), State: st.GetState().String(), ElapsedSeconds: res.Elapsed.Seconds(),
		Examples: res.Examples, Message: st.GetMessage(), CheckpointMD5s: []string{}}
	if s := res.Elapsed.Seconds(); s > 0 {
		out.ExamplesPerSecond = float64(res.Examples) / s
	}
	if acc, ok := res.FinalAccuracy(); ok {
		out.FinalTestAccuracy = &acc
	}
	v, md5s := res.LastCheckpoint()
	out.CheckpointVersion = v
	out.CheckpointMD5s = append(out.CheckpointMD5s, md5s...)
	return out
}

// printTrainResult prints the end of a job in the --output format and
// returns reportResult's exit error (job failed: 2, below target: 3).
func printTrainResult(g *globals, res *followResult, target float64) error {
	if err := g.printer.Object(newTrainSummary(res), func(w io.Writer) { _ = reportResult(w, res, target) }); err != nil {
		return err
	}
	return reportResult(io.Discard, res, target)
}
