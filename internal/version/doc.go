// Package version is the build's identity: the version, revision and
// commit time stamped in from git with -ldflags by `make build` and `make
// release`, else the module version and VCS stamp that `go build` records (runtime/debug.ReadBuildInfo), and the versions
// of the on-disk formats this build writes and reads.
//
// A node refuses a snapshot or checkpoint of a format newer than the
// one it knows (SnapshotFormat, CheckpointFormat) with an error naming
// both, so a rolling upgrade that writes the new format on an upgraded
// node never silently loses data on an old one (see the README's
// rolling-upgrade note).
package version
