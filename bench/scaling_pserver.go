package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
)

// scalingSpec is a sync job of one dense layer of params float32s with
// momentum, on slots pservers.
func scalingSpec(params int64, slots int32) *pb.JobSpec {
	return &pb.JobSpec{Name: "scale", Mode: pb.UpdateMode_UPDATE_MODE_SYNC, Seed: 1, NumPservers: slots,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{params / 1024, 1024}, Init: pb.Initializer_INIT_NORMAL}}}
}

// slotGrads is a constant gradient of every block slot s holds.
func slotGrads(s *pserver.Slot, slot int32) []*pb.Tensor {
	l := s.Layout()
	var ts []*pb.Tensor
	for _, p := range l.Params {
		for blk := int64(0); blk < p.Blocks; blk++ {
			if l.SlotOfBlock(p, blk) != slot {
				continue
			}
			lo, hi := l.BlockRange(p, blk)
			buf := make([]byte, 4*(hi-lo))
			for i := 0; i+4 <= len(buf); i += 4 {
				binary.LittleEndian.PutUint32(buf[i:], math.Float32bits(float32(i%7-3)*1e-3))
			}
			ts = append(ts, &pb.Tensor{Name: p.Spec.GetName(), Block: blk, Data: buf})
		}
	}
	return ts
}

// simSteps runs steps sync steps in which every trainer (a goroutine: a
// light simulated trainer, no model, no gRPC) pushes its gradient to
// every slot, and returns the median step wall time and the process CPU
// per step. The slots are in this process, as a node runs them.
func simSteps(ctx context.Context, slots []*pserver.Slot, trainers, steps int) (time.Duration, time.Duration, error) {
	ids := make([]string, trainers)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%d", i)
	}
	grads := make([][]*pb.Tensor, len(slots))
	for i, s := range slots {
		s.SetTrainers(ids)
		grads[i] = slotGrads(s, int32(i))
	}
	var walls []time.Duration
	var cpu time.Duration
	for step := 0; step <= steps; step++ { // step 0 warms the optimizer state up, untimed
		c0, t0 := cpuTime(), time.Now()
		errs := make(chan error, trainers*len(slots))
		var wg sync.WaitGroup
		for si, s := range slots {
			v := s.Version()
			for _, t := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := s.Push(ctx, &pb.PushRequest{Job: "scale", Trainer: t, Version: v, Step: v,
						Grads: grads[si], Examples: 64, PushId: uint64(step + 1)})
					if err != nil {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return 0, 0, err
		}
		if step > 0 {
			walls, cpu = append(walls, time.Since(t0)), cpu+cpuTime()-c0
		}
	}
	slices.Sort(walls)
	return walls[len(walls)/2], cpu / time.Duration(steps), nil
}

func newSlots(params int64, n int32) ([]*pserver.Slot, error) {
	spec := scalingSpec(params, n)
	slots := make([]*pserver.Slot, n)
	for i := range slots {
		s, err := pserver.NewSlot(spec, int32(i), n)
		if err != nil {
			return nil, err
		}
		slots[i] = s
	}
	return slots, nil
}

// syncStepVsTrainers: one slot of a 1M-param layer (256K quick), 1 to 64
// trainers pushing each step.
func syncStepVsTrainers(ctx context.Context, quick bool) ([]Curve, error) {
	params, steps := int64(1<<20), 5
	if quick {
		params, steps = 1<<18, 3
	}
	wall := Curve{Name: "sync-step-vs-trainers", Title: fmt.Sprintf("sync step wall time, %s params, 1 slot", FormatValue(float64(params))),
		XLabel: "trainers", YLabel: "ms per step",
		Expect: "<= 1: the slot sums one gradient per trainer (linear work) on 2 cores"}
	cpu := Curve{Name: "pserver-cpu-vs-trainers", Title: fmt.Sprintf("pserver CPU per sync step, %s params, 1 slot", FormatValue(float64(params))),
		XLabel: "trainers", YLabel: "CPU ms per step",
		Expect: "1: one gradient parsed and summed per trainer"}
	for _, n := range []int{1, 2, 4, 8, 16, 32, 64} {
		slots, err := newSlots(params, 1)
		if err != nil {
			return nil, err
		}
		w, c, err := simSteps(ctx, slots, n, steps)
		if err != nil {
			return nil, fmt.Errorf("%d trainers: %w", n, err)
		}
		wall.Points = append(wall.Points, Point{float64(n), ms(w)})
		cpu.Points = append(cpu.Points, Point{float64(n), ms(c)})
	}
	return []Curve{wall, cpu}, nil
}

// syncStepVsSlots: a fixed 4M-param layer (1M quick) split over 1 to 16
// slots, 4 trainers.
func syncStepVsSlots(ctx context.Context, quick bool) ([]Curve, error) {
	params, steps, trainers := int64(4<<20), 5, 4
	if quick {
		params, steps = 1<<20, 3
	}
	wall := Curve{Name: "sync-step-vs-slots", Title: fmt.Sprintf("sync step wall time, %s params fixed, %d trainers", FormatValue(float64(params)), trainers),
		XLabel: "slots", YLabel: "ms per step",
		Expect: "<= 0 on many cores; ~0 here (2 cores): the same work split, plus per-push overhead"}
	cpu := Curve{Name: "pserver-cpu-vs-slots", Title: fmt.Sprintf("pserver CPU per sync step, %s params fixed, %d trainers", FormatValue(float64(params)), trainers),
		XLabel: "slots", YLabel: "CPU ms per step (all slots)",
		Expect: "~0: the same params updated, only more, smaller pushes"}
	for _, n := range []int32{1, 2, 4, 8, 16} {
		slots, err := newSlots(params, n)
		if err != nil {
			return nil, err
		}
		w, c, err := simSteps(ctx, slots, trainers, steps)
		if err != nil {
			return nil, fmt.Errorf("%d slots: %w", n, err)
		}
		wall.Points = append(wall.Points, Point{float64(n), ms(w)})
		cpu.Points = append(cpu.Points, Point{float64(n), ms(c)})
	}
	return []Curve{wall, cpu}, nil
}
