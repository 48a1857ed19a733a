// Package vshard is the on-disk format of one virtual shard of a job's
// parameters, the unit of checkpoint and repartitioning: values, optimizer
// state and per-entry update counts, self-describing (parameter names,
// kinds and shapes), versioned and CRC-32C checked (the layout is
// documented on Format in vshard.go; checkpoints store one blob per vshard,
// pserver/checkpoint/FORMAT.md).
//
// Snapshot.Encode writes a blob; Decode reads one back, refusing a
// truncated or damaged blob (wire.ErrCorrupt) or one of a newer format
// (wire.ErrNewerFormat), and never panics or allocates beyond the blob's
// size on bad input. DecodeValues reads only the values, for export and
// inspection tools that have no job spec.
//
// The package holds no state and knows nothing of slots: the server
// (pserver) takes Snapshots (Slot.Snapshot, EncodeVShard) and rebuilds
// slots from blobs (RestoreSlot), checking each blob against the job spec.
// It imports only pserver/wire (for the sentinels and float packing).
package vshard
