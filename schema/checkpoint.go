package schema

// EpochStride separates sync trajectories in checkpoint versions:
// version = epoch*EpochStride + step. A rollback (a slot restored from an
// older version, every other slot following it) starts a new epoch, so
// versions written on the new trajectory are newer than everything the
// abandoned one wrote, and the two never share a version number (which
// would let Restore combine slots of different trajectories). Steps stay
// below it (jobspec.MaxSteps is larger, but a pserver step that reached
// it would need a billion sync steps).
const EpochStride = 1_000_000_000

// VersionStep is the pserver step whose parameters checkpoint version v
// holds: v % EpochStride.
func VersionStep(v int64) int64 { return v % EpochStride }

// VersionEpoch is the sync trajectory (epoch) of checkpoint version v:
// v / EpochStride.
func VersionEpoch(v int64) int64 { return v / EpochStride }
