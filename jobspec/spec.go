package jobspec

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/shape"
)

// Bounds of a JobSpec. Every numeric field has one; ValidateSpec refuses a
// spec outside them with an error wrapping errs.ErrInvalid that names the
// field. They are constants (not flags) because validation runs inside the
// replicated state machine: every replica must accept or refuse the same
// spec. Per-node memory budgets are the node's business (package node) and
// are checked where memory is allocated; MaxJobBytes is the cluster-wide cap
// that no submission can pass, whatever the nodes' flags say.
const (
	// MaxEvents is the number of newest events kept per job (a ring).
	MaxEvents = 100000
	// MaxTasks bounds ceil(dataset.records / records_per_task) of one job.
	MaxTasks = 1 << 22
	// MaxNameLen is the longest job name.
	MaxNameLen = 63
	// MaxTaskTimeouts bounds spec.max_task_timeouts.
	MaxTaskTimeouts = 10000

	DefaultMaxTaskTimeouts    = 3
	DefaultTaskTimeoutFloorMs = 10000
	DefaultNumVirtualShards   = 64
	DefaultDenseBlockSize     = 65536
	DefaultCheckpointReplicas = 2
	// DefaultSlotReplicas is JobSpec.replicas when unset and the master
	// did not choose (it picks 2 when the live pserver nodes have the
	// capacity, master/admission.go): one copy of each pserver slot (the
	// lease handover and checkpoint restore of pserver/DESIGN.md).
	DefaultSlotReplicas = 1
	// MaxSlotReplicas bounds JobSpec.replicas (a primary and two backups).
	MaxSlotReplicas = 3
	// MaxReplicasDefault bounds JobSpec.replicas_default, the master's
	// reason for the replicas it chose (bytes).
	MaxReplicasDefault = 128

	// MaxRecords bounds dataset.records and records_per_task. With it the
	// record range of every task, [id*records_per_task, ...), fits an int64.
	MaxRecords = int64(1) << 50
	// MaxPasses bounds passes.
	MaxPasses = 10_000
	// MaxSteps bounds max_steps.
	MaxSteps = int64(1) << 53
	// MaxBatchSize bounds batch_size.
	MaxBatchSize = 1 << 20
	// MaxPservers bounds num_pservers.
	MaxPservers = 1024
	// MaxVirtualShards bounds num_virtual_shards (issue 19: 2^30 was accepted).
	MaxVirtualShards = 1 << 16
	// MaxStaleness bounds staleness.
	MaxStaleness = 1 << 20
	// MaxKeepMax bounds checkpoint.keep_max.
	MaxKeepMax = 1000
	// MaxReplicas bounds checkpoint.replicas.
	MaxReplicas = 16
	// MaxEverySteps bounds checkpoint.every_steps.
	MaxEverySteps = int64(1) << 40
	// MaxEverySeconds bounds checkpoint.every_seconds (10 years; as a
	// time.Duration it is far from overflowing).
	MaxEverySeconds = int64(10 * 365 * 24 * 3600)
	// MaxTaskTimeoutFloorMs bounds task_timeout_floor_ms (7 days).
	MaxTaskTimeoutFloorMs = int64(7 * 24 * 3600 * 1000)
	// MaxDenseBlockSize bounds dense_block_size (float32s per block, 64 MiB).
	MaxDenseBlockSize = int64(1) << 24
	// MaxHiddenLayers and MaxLayerWidth bound model.hidden.
	MaxHiddenLayers = 16
	MaxLayerWidth   = 1 << 20
	// MaxEmbeddingDim and MaxHashBuckets bound model.embedding_dim and
	// model.hash_buckets.
	MaxEmbeddingDim = 1 << 16
	MaxHashBuckets  = int64(1) << 40
	// MaxParams bounds len(params); MaxParamRank the rank of a shape.
	MaxParams    = 1024
	MaxParamRank = 8
	// MaxPathLen bounds dataset.path and dataset.format; MaxParamNameLen a
	// parameter's name.
	MaxPathLen      = 4096
	MaxParamNameLen = 256
	// MaxSpecBytes bounds the encoded spec (it is kept in the job's state
	// and copied into every status).
	MaxSpecBytes = 64 << 10
	// MaxJobBytes is the cluster-wide admission cap on a job's parameter and
	// optimizer-state bytes (StateBytes), summed over all its slots: 64 GiB.
	// A spec above it is refused at submit (issue 12 item 11).
	MaxJobBytes = int64(64) << 30
	// BytesPerElement is the size of one parameter element (float32).
	BytesPerElement = 4
)

// OptimizerStateFactor is how many float32 tensors of a parameter's shape a
// pserver holds per parameter under optimizer name: the parameter itself
// plus the optimizer's state slots (sgd none; momentum the velocity;
// adagrad the accumulator; adam m and v). 0 for an unknown optimizer.
func OptimizerStateFactor(name string) int64 {
	switch name {
	case "sgd":
		return 1
	case "momentum", "adagrad":
		return 2
	case "adam":
		return 3
	}
	return 0
}

// NumTasks is the number of tasks of records records cut records_per_task at
// a time: ceil(records / recordsPerTask), computed without overflow. It is
// the one task count of the package (validation, Submit and snapshot
// restore all use it). Both arguments must be > 0.
func NumTasks(records, recordsPerTask int64) int64 {
	return (records-1)/recordsPerTask + 1
}

// ParamElements returns the number of elements of a shape: the
// overflow-checked product of its dimensions (internal/shape, the one
// helper fsm, pserver and trainer share), each of which must be >= 1. ok is
// false for an empty shape, a dimension < 1 or more than shape.MaxElements.
func ParamElements(dims []int64) (n int64, ok bool) {
	if len(dims) == 0 || slices.Min(dims) < 1 {
		return 0, false
	}
	n, err := shape.Elements(dims)
	return n, err == nil
}

// StateBytes returns the bytes a job's parameters and optimizer state take
// on the pservers, all slots together: elements x BytesPerElement x
// OptimizerStateFactor(optimizer). The elements are the larger of the sum
// over spec.params (overflow-checked) and a lower bound from spec.model
// (the products of consecutive hidden widths plus hash_buckets x
// embedding_dim), so a spec that names a huge model but no params is
// counted too. Trainers hold the dense part once more (parameters and
// gradients), which per-node budgets (package node) account for. An error
// wraps errs.ErrInvalid naming the field whose arithmetic overflows. It is
// what Submit checks against MaxJobBytes; node and pserver code may use it
// for their own budgets.
func StateBytes(spec *pb.JobSpec) (int64, error) {
	var elems int64
	for i, p := range spec.GetParams() {
		n, ok := ParamElements(p.GetShape())
		if !ok {
			return 0, invalid(fmt.Sprintf("params[%d].shape", i), "%v: every dimension must be >= 1 and the product at most 2^48 elements", p.GetShape())
		}
		if elems, ok = shape.Add(elems, n); !ok {
			return 0, invalid("params", "the total element count overflows an int64")
		}
	}
	model, err := modelElements(spec.GetModel())
	if err != nil {
		return 0, err
	}
	elems = max(elems, model)
	f := OptimizerStateFactor(spec.GetOptimizer().GetName())
	if f == 0 {
		f = 1
	}
	b, ok := shape.Mul(elems, BytesPerElement*f)
	if !ok {
		return 0, invalid("params", "%d elements x %d bytes overflows an int64", elems, BytesPerElement*f)
	}
	return b, nil
}

// modelElements is the lower bound of the model's element count from its
// hidden widths and embedding table.
func modelElements(m *pb.ModelSpec) (int64, error) {
	var n int64
	h := m.GetHidden()
	for i := range h {
		if h[i] < 1 {
			return 0, invalid(fmt.Sprintf("model.hidden[%d]", i), "must be >= 1, got %d", h[i])
		}
		w := int64(h[i]) // bias
		if i+1 < len(h) && h[i+1] >= 1 {
			w += int64(h[i]) * int64(h[i+1]) // int32 x int32 fits an int64
		}
		var ok bool
		if n, ok = shape.Add(n, w); !ok {
			return 0, invalid("model.hidden", "the layer sizes overflow an int64")
		}
	}
	if m.GetEmbeddingDim() < 0 {
		return 0, invalid("model.embedding_dim", "must be >= 0, got %d", m.GetEmbeddingDim())
	}
	if m.GetHashBuckets() < 0 {
		return 0, invalid("model.hash_buckets", "must be >= 0, got %d", m.GetHashBuckets())
	}
	emb, ok := shape.Mul(m.GetHashBuckets(), int64(m.GetEmbeddingDim()))
	if !ok {
		return 0, invalid("model.hash_buckets", "%d x embedding_dim %d overflows an int64", m.GetHashBuckets(), m.GetEmbeddingDim())
	}
	if n, ok = shape.Add(n, emb); !ok {
		return 0, invalid("model", "the element count overflows an int64")
	}
	return n, nil
}

// ValidateSpec returns a copy of in with its defaults filled, or an error
// wrapping errs.ErrInvalid that names the offending field and its bound. It
// is the one validation of a job spec: Submit calls it, and a service may
// call it before proposing to answer InvalidArgument without a Raft round.
// Every numeric field is bounded (see the Max constants), every derived
// quantity (task count, element counts, state bytes) is computed with
// overflow checks, every float is finite, and the whole spec is at most
// MaxSpecBytes encoded. A spec it accepts gives a job that MarshalBinary and
// UnmarshalBinary reproduce exactly. (The snapshot decoder checks structure,
// not these bounds, so a job accepted under older, looser bounds still
// restores.)
func ValidateSpec(in *pb.JobSpec) (*pb.JobSpec, error) {
	if in == nil {
		return nil, invalid("spec", "is required")
	}
	if n := proto.Size(in); n > MaxSpecBytes {
		return nil, invalid("spec", "is %d bytes encoded, more than %d", n, MaxSpecBytes)
	}
	s := proto.Clone(in).(*pb.JobSpec)
	if err := ValidateName(s.Name); err != nil {
		return nil, err
	}
	if s.Model == nil || !slices.Contains(knownModels, s.Model.Name) {
		return nil, invalid("model.name", "%q unknown (known: %s)", s.GetModel().GetName(), strings.Join(knownModels, ", "))
	}
	if s.Model.Name == ModelExternal && len(s.Params) == 0 {
		return nil, invalid("params", "model %q needs its parameter list (name, shape, embedding, init)", ModelExternal)
	}
	if len(s.Model.Hidden) > MaxHiddenLayers {
		return nil, invalid("model.hidden", "has %d layers, more than %d", len(s.Model.Hidden), MaxHiddenLayers)
	}
	for i, h := range s.Model.Hidden {
		if h < 1 || h > MaxLayerWidth {
			return nil, invalid(fmt.Sprintf("model.hidden[%d]", i), "must be in [1, %d], got %d", MaxLayerWidth, h)
		}
	}
	if d := s.Model.EmbeddingDim; d < 0 || d > MaxEmbeddingDim {
		return nil, invalid("model.embedding_dim", "must be in [0, %d], got %d", MaxEmbeddingDim, d)
	}
	if b := s.Model.HashBuckets; b < 0 || b > MaxHashBuckets {
		return nil, invalid("model.hash_buckets", "must be in [0, %d], got %d", MaxHashBuckets, b)
	}
	if s.Dataset == nil || s.Dataset.Path == "" {
		return nil, invalid("dataset.path", "must not be empty")
	}
	if len(s.Dataset.Path) > MaxPathLen {
		return nil, invalid("dataset.path", "is %d bytes, more than %d", len(s.Dataset.Path), MaxPathLen)
	}
	if len(s.Dataset.Format) > MaxPathLen {
		return nil, invalid("dataset.format", "is %d bytes, more than %d", len(s.Dataset.Format), MaxPathLen)
	}
	if r := s.Dataset.Records; r <= 0 || r > MaxRecords {
		return nil, invalid("dataset.records", "must be in [1, %d], got %d", MaxRecords, r)
	}
	if r := s.RecordsPerTask; r <= 0 || r > MaxRecords {
		return nil, invalid("records_per_task", "must be in [1, %d], got %d", MaxRecords, r)
	}
	if n := NumTasks(s.Dataset.Records, s.RecordsPerTask); n > MaxTasks {
		return nil, invalid("records_per_task", "gives %d tasks, more than %d", n, MaxTasks)
	}
	if b := s.BatchSize; b <= 0 || b > MaxBatchSize {
		return nil, invalid("batch_size", "must be in [1, %d], got %d", MaxBatchSize, b)
	}
	if p := s.Passes; p <= 0 || p > MaxPasses {
		return nil, invalid("passes", "must be in [1, %d], got %d", MaxPasses, p)
	}
	if m := s.MaxSteps; m < 0 || m > MaxSteps {
		return nil, invalid("max_steps", "must be in [0, %d], got %d", MaxSteps, m)
	}
	if err := validOptimizer(s.Optimizer); err != nil {
		return nil, err
	}
	if p := s.NumPservers; p <= 0 || p > MaxPservers {
		return nil, invalid("num_pservers", "must be in [1, %d], got %d", MaxPservers, p)
	}
	if s.Replicas == 0 {
		// The master fills replicas and replicas_default at admission
		// (master/admission.go); a spec that reaches here without it gets
		// DefaultSlotReplicas and no reason.
		s.Replicas, s.ReplicasDefault = DefaultSlotReplicas, ""
	}
	if r := s.Replicas; r < 1 || r > MaxSlotReplicas {
		return nil, invalid("replicas", "must be in [1, %d], got %d", MaxSlotReplicas, r)
	}
	if n := len(s.ReplicasDefault); n > MaxReplicasDefault {
		return nil, invalid("replicas_default", "must be at most %d bytes, got %d", MaxReplicasDefault, n)
	}
	if _, ok := pb.UpdateMode_name[int32(s.Mode)]; !ok {
		return nil, invalid("mode", "unknown value %d", s.Mode)
	}
	if st := s.Staleness; st < 0 || st > MaxStaleness {
		return nil, invalid("staleness", "must be in [0, %d], got %d", MaxStaleness, st)
	}
	if s.Checkpoint == nil {
		s.Checkpoint = &pb.CheckpointPolicy{}
	}
	if err := validBounds(s); err != nil {
		return nil, err
	}
	if err := validParams(s.Params); err != nil {
		return nil, err
	}
	if c := s.Checkpoint; c.Replicas == 0 {
		c.Replicas = DefaultCheckpointReplicas
	}
	if s.MaxTaskTimeouts == 0 {
		s.MaxTaskTimeouts = DefaultMaxTaskTimeouts
	}
	if s.TaskTimeoutFloorMs == 0 {
		s.TaskTimeoutFloorMs = DefaultTaskTimeoutFloorMs
	}
	if s.NumVirtualShards == 0 {
		s.NumVirtualShards = DefaultNumVirtualShards
	}
	if s.DenseBlockSize == 0 {
		s.DenseBlockSize = DefaultDenseBlockSize
	}
	if s.NumVirtualShards < s.NumPservers {
		return nil, invalid("num_virtual_shards", "(%d) must be >= num_pservers (%d)", s.NumVirtualShards, s.NumPservers)
	}
	b, err := StateBytes(s)
	if err != nil {
		return nil, err
	}
	if b > MaxJobBytes {
		return nil, invalid("params", "need %d bytes of parameters and %s optimizer state, more than the cluster's limit of %d (MaxJobBytes)",
			b, s.Optimizer.Name, MaxJobBytes)
	}
	return s, nil
}

// validBounds checks the checkpoint policy's and the task, shard and
// accuracy bounds of s (whose Checkpoint is set).
func validBounds(s *pb.JobSpec) error {
	c := s.Checkpoint
	switch {
	case c.KeepMax < 0 || c.KeepMax > MaxKeepMax:
		return invalid("checkpoint.keep_max", "must be in [0, %d], got %d", MaxKeepMax, c.KeepMax)
	case c.Replicas < 0 || c.Replicas > MaxReplicas:
		return invalid("checkpoint.replicas", "must be in [0, %d], got %d", MaxReplicas, c.Replicas)
	case c.EverySteps < 0 || c.EverySteps > MaxEverySteps:
		return invalid("checkpoint.every_steps", "must be in [0, %d], got %d", MaxEverySteps, c.EverySteps)
	case c.EverySeconds < 0 || c.EverySeconds > MaxEverySeconds:
		return invalid("checkpoint.every_seconds", "must be in [0, %d], got %d", MaxEverySeconds, c.EverySeconds)
	case s.MaxTaskTimeouts < 0 || s.MaxTaskTimeouts > MaxTaskTimeouts:
		return invalid("max_task_timeouts", "must be in [0, %d], got %d", MaxTaskTimeouts, s.MaxTaskTimeouts)
	case s.TaskTimeoutFloorMs < 0 || s.TaskTimeoutFloorMs > MaxTaskTimeoutFloorMs:
		return invalid("task_timeout_floor_ms", "must be in [0, %d], got %d", MaxTaskTimeoutFloorMs, s.TaskTimeoutFloorMs)
	case s.NumVirtualShards < 0 || s.NumVirtualShards > MaxVirtualShards:
		return invalid("num_virtual_shards", "must be in [0, %d], got %d", MaxVirtualShards, s.NumVirtualShards)
	case s.DenseBlockSize < 0 || s.DenseBlockSize > MaxDenseBlockSize:
		return invalid("dense_block_size", "must be in [0, %d], got %d", MaxDenseBlockSize, s.DenseBlockSize)
	case !finite(s.TargetAccuracy) || s.TargetAccuracy < 0 || s.TargetAccuracy > 1:
		return invalid("target_accuracy", "must be in [0, 1], got %v", s.TargetAccuracy)
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func validOptimizer(o *pb.OptimizerSpec) error {
	if o == nil || !slices.Contains(knownOptimizers, o.Name) {
		return invalid("optimizer.name", "%q unknown (known: %s)", o.GetName(), strings.Join(knownOptimizers, ", "))
	}
	if lr := o.LearningRate; !(lr > 0) || !finite(lr) {
		return invalid("optimizer.learning_rate", "must be a finite number > 0, got %v", lr)
	}
	for _, f := range []struct {
		name   string
		v      float64
		lo, hi float64
	}{
		{"optimizer.momentum", o.Momentum, 0, 1},
		{"optimizer.beta1", o.Beta1, 0, 1},
		{"optimizer.beta2", o.Beta2, 0, 1},
		{"optimizer.epsilon", o.Epsilon, 0, 1},
		{"optimizer.weight_decay", o.WeightDecay, 0, 1},
		{"optimizer.lr_decay", o.LrDecay, 0, 1e6},
	} {
		if !finite(f.v) || f.v < f.lo || f.v >= f.hi {
			return invalid(f.name, "must be in [%v, %v), got %v", f.lo, f.hi, f.v)
		}
	}
	return nil
}

func validParams(ps []*pb.ParamSpec) error {
	if len(ps) > MaxParams {
		return invalid("params", "has %d entries, more than %d", len(ps), MaxParams)
	}
	names := make(map[string]bool, len(ps))
	for i, p := range ps {
		field := fmt.Sprintf("params[%d]", i)
		// bad names the parameter in the message (an external model's
		// author knows it by name, not by index).
		bad := func(f, format string, args ...any) error {
			if p.Name == "" || len(p.Name) > MaxParamNameLen {
				return invalid(f, format, args...)
			}
			return invalid(f, "(param %q) "+format, append([]any{p.Name}, args...)...)
		}
		switch {
		case p.Name == "" || len(p.Name) > MaxParamNameLen:
			return bad(field+".name", "must be 1 to %d bytes, got %d", MaxParamNameLen, len(p.Name))
		case names[p.Name]:
			return bad(field+".name", "%q appears twice", p.Name)
		case len(p.Shape) == 0 || len(p.Shape) > MaxParamRank:
			return bad(field+".shape", "must have 1 to %d dimensions, got %d", MaxParamRank, len(p.Shape))
		case p.Embedding && len(p.Shape) != 2:
			return bad(field+".shape", "of an embedding table must be [rows, dim], got %v", p.Shape)
		case !finite(p.Scale) || p.Scale < 0:
			return bad(field+".scale", "must be a finite number >= 0, got %v", p.Scale)
		}
		if _, ok := pb.Initializer_name[int32(p.Init)]; !ok {
			return bad(field+".init", "unknown value %d", p.Init)
		}
		if _, ok := ParamElements(p.Shape); !ok {
			return bad(field+".shape", "%v: every dimension must be >= 1 and the product at most 2^48 elements", p.Shape)
		}
		names[p.Name] = true
	}
	return nil
}

// ModelExternal is the model kind of a job whose model raftps does not
// implement (a PyTorch trainer's, say): its spec must list every parameter
// (params: name, shape, dense or embedding, initializer). The pservers,
// checkpoints, restore, repartition and rollback work on the parameter list
// alone; raftps's own trainers do not serve such a job.
const ModelExternal = "external"

var (
	knownModels     = []string{ModelExternal, "hashed_lr", "mlp", "softmax"}
	knownOptimizers = []string{"adagrad", "adam", "momentum", "sgd"}
)

// invalid returns an error wrapping errs.ErrInvalid that names field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", errs.ErrInvalid, field, fmt.Sprintf(format, args...))
}

// ValidateName checks a job name: 1 to MaxNameLen bytes of [a-z0-9-_.],
// not "." or "..". An error wraps errs.ErrInvalid.
func ValidateName(name string) error {
	if name == "" {
		return invalid("name", "must not be empty")
	}
	if name == "." || name == ".." {
		return invalid("name", "%q is not a job name", name)
	}
	if len(name) > MaxNameLen {
		return invalid("name", "%q is longer than %d characters", name, MaxNameLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return invalid("name", "%q may only contain [a-z0-9-_.]", name)
		}
	}
	return nil
}
