package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/raftps/raftps/internal/version"
)

// newVersionCmd is `raftps version`: this binary's version, VCS revision,
// Go version and the snapshot and checkpoint formats it reads and writes.
// The nodes' versions are in `raftps endpoint status --cluster`.
func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "print the version of this binary and the formats it reads and writes", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			in := version.Get()
			return g.printer.Object(in, func(w io.Writer) {
				fmt.Fprintf(w, "raftps version: %s\nrevision: %s\nmodified: %t\ncommit time: %s\ngo version: %s\nplatform: %s\nsnapshot format: %d\ncheckpoint format: %d\n",
					in.Version, in.Revision, in.Modified, in.Time, in.GoVersion, in.Platform, in.SnapshotFormat, in.CheckpointFormat)
			})
		},
	}
}
