package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/raftps/raftps/cmd/raftps/offline"
	"github.com/raftps/raftps/raftstore"
)

// newSnapshotCmd is `raftps snapshot save|restore|status` (etcdctl's).
// The file is the stream of the Maintenance.Snapshot RPC (raftstore/etcdapi):
// a bolt header whose one key tells etcdctl's user to run `raftps snapshot
// status|restore`, the node's FSM snapshot (format version in its magic)
// padded, its length and a SHA-256 of everything before
// (etcdapi.EncodeSnapshot); `etcdctl snapshot save` against a raftps node
// writes the same file, which `etcdctl snapshot status|restore` refuse.
func newSnapshotCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "snapshot", Short: "save, restore and inspect backups of the cluster's metadata"}
	c.AddCommand(newSnapshotSaveCmd(g), newSnapshotRestoreCmd(g), newSnapshotStatusCmd(g))
	return c
}

// newSnapshotSaveCmd is `raftps snapshot save`.
func newSnapshotSaveCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "save FILE",
		Short: "stream a consistent snapshot of the metadata from a node to FILE",
		Long: `Stream a point-in-time snapshot of the metadata (keys, leases, watch history,
jobs, client sessions) from a node to FILE. The node captures it at one Raft
index; it is checked (SHA-256 and a full decode) before FILE appears, so a
FILE that exists is whole. A full backup of a job is this snapshot plus
` + "`raftps checkpoint export`" + ` of its newest checkpoint (the parameters).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.ctx(cmd.Context())
			defer cancel()
			if err := g.dial(ctx, cl); err != nil {
				return err
			}
			path := args[0]
			tmp := path + ".part"
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			defer os.Remove(tmp)
			defer f.Close()
			stream, err := etcdpb.NewMaintenanceClient(cl.Conn()).Snapshot(ctx, &etcdpb.SnapshotRequest{})
			if err != nil {
				return rpcError(err)
			}
			for {
				resp, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return rpcError(err)
				}
				if _, err := f.Write(resp.Blob); err != nil {
					return err
				}
			}
			if err := f.Sync(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			out, err := offline.InspectSnapshotFile(tmp)
			if err != nil {
				return fmt.Errorf("the snapshot received is not valid (not saved): %w", err)
			}
			if err := os.Rename(tmp, path); err != nil {
				return err
			}
			out.Path = path
			return g.printer.Object(out, func(w io.Writer) {
				fmt.Fprintf(w, "Snapshot saved at %s: revision %d, index %d, %d keys, %d leases, %d jobs, %d bytes, sha256 %s\n",
					path, out.Revision, out.Index, out.Keys, out.Leases, out.Jobs, out.FileBytes, out.SHA256)
			})
		},
	}
	return c
}

// newSnapshotStatusCmd is `raftps snapshot status`.
func newSnapshotStatusCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "status FILE", Short: "check a snapshot file and show what it holds", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			out, err := offline.InspectSnapshotFile(args[0])
			if err != nil {
				return err
			}
			rows := [][]string{{fmt.Sprint(out.Revision), fmt.Sprint(out.Index), fmt.Sprint(out.Keys), fmt.Sprint(out.Leases),
				fmt.Sprint(out.Jobs), fmt.Sprint(out.FileBytes), out.SHA256[:16]}}
			return g.printer.Table(out, []string{"REVISION", "INDEX", "KEYS", "LEASES", "JOBS", "BYTES", "SHA256"}, rows)
		},
	}
	return c
}

// newSnapshotRestoreCmd is `raftps snapshot restore`.
func newSnapshotRestoreCmd(g *globals) *cobra.Command {
	var (
		dataDir, id, raftAddr, logStore string
		initialCluster                  []string
	)
	c := &cobra.Command{
		Use:   "restore FILE --data-dir DIR --id ID [--raft-addr ADDR | --initial-cluster id=raftaddr,...]",
		Short: "seed a new node's data dir from a snapshot file",
		Long: `Write a data dir from which ` + "`raftps node`" + ` starts a NEW cluster holding the
snapshot's state (etcdctl's snapshot restore). Either restore one node (its
--raft-addr) and let the others join it with --join, or restore every member
of the new cluster from the same FILE with the same --initial-cluster
(id=advertised raft address, ...) and start them all. The file is checked
completely first; a corrupt or newer-format snapshot, or a data dir that
already holds Raft state, is refused and nothing is written.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			out, err := offline.Restore(offline.RestoreConfig{File: args[0], DataDir: dataDir, ID: id, RaftAddr: raftAddr,
				InitialCluster: initialCluster, LogStore: logStore})
			if err != nil {
				return err
			}
			return g.printer.Object(out, func(w io.Writer) {
				fmt.Fprintf(w, "Restored revision %d (index %d, %d keys, %d jobs) into %s for %s; members %s\n",
					out.Revision, out.Index, out.Keys, out.Jobs, out.DataDir, out.ID, strings.Join(out.Members, ","))
			})
		},
	}
	rf := c.Flags()
	rf.StringVar(&dataDir, "data-dir", "", "data dir of the new node (must hold no Raft state)")
	rf.StringVar(&id, "id", "", "id of the new node")
	rf.StringVar(&raftAddr, "raft-addr", "127.0.0.1:7001", "advertised Raft address of the new node (without --initial-cluster)")
	rf.StringVar(&logStore, "raft-log-store", raftstore.LogStoreBoltDB, "Raft log store of the new node: boltdb or wal (start the node with the same --raft-log-store)")
	rf.StringSliceVar(&initialCluster, "initial-cluster", nil, "every member of the new cluster as id=raftaddr (the same list on each)")
	return c
}
