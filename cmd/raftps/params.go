package main

import (
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
	"github.com/raftps/raftps/trainer/model"
)

// Fashion-MNIST's shape: the models the CLI submits are built for it.
const (
	fashionInputDim = 28 * 28
	fashionClasses  = 10
)

// fillParams sets spec.params from the model the spec names, so that the
// pservers know every parameter's shape and initializer; an external
// model's params are the spec's own (the master checks them).
func fillParams(spec *pb.JobSpec) error {
	if spec.GetModel().GetName() == jobspec.ModelExternal {
		return nil
	}
	m, err := model.Build(spec.Model, fashionInputDim, fashionClasses)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	spec.Params = m.Params()
	return nil
}
