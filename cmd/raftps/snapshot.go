package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/etcdapi"
)

// snapshotSaved is the result of `snapshot save` and `snapshot status`.
type snapshotSaved struct {
	Path string `json:"path"`
	raftstore.SnapshotInfo
	// SHA256 is the checksum of the whole file (its last 32 bytes are a
	// SHA-256 of the rest, checked on every read).
	SHA256 string `json:"sha256"`
	// FileBytes is the file's size.
	FileBytes int64 `json:"file_bytes"`
}

// newSnapshotCmd is `raftps snapshot save|restore|status` (etcdctl's).
// The file is the stream of the Maintenance.Snapshot RPC (raftstore/etcdapi):
// a bolt header whose one key tells etcdctl's user to run `raftps snapshot
// status|restore`, the node's FSM snapshot (format version in its magic)
// padded, its length and a SHA-256 of everything before
// (etcdapi.EncodeSnapshot); `etcdctl snapshot save` against a raftps node
// writes the same file, which `etcdctl snapshot status|restore` refuse.
func newSnapshotCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "snapshot", Short: "save, restore and inspect backups of the cluster's metadata"}
	save := &cobra.Command{
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
			out, err := inspectSnapshotFile(tmp)
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

	status := &cobra.Command{
		Use: "status FILE", Short: "check a snapshot file and show what it holds", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			out, err := inspectSnapshotFile(args[0])
			if err != nil {
				return err
			}
			rows := [][]string{{fmt.Sprint(out.Revision), fmt.Sprint(out.Index), fmt.Sprint(out.Keys), fmt.Sprint(out.Leases),
				fmt.Sprint(out.Jobs), fmt.Sprint(out.FileBytes), out.SHA256[:16]}}
			return g.printer.Table(out, []string{"REVISION", "INDEX", "KEYS", "LEASES", "JOBS", "BYTES", "SHA256"}, rows)
		},
	}

	var (
		dataDir, id, raftAddr, logStore string
		initialCluster                  []string
	)
	restore := &cobra.Command{
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
			if dataDir == "" || id == "" {
				return errors.New("--data-dir and --id are required")
			}
			servers, err := parseInitialCluster(id, raftAddr, initialCluster)
			if err != nil {
				return err
			}
			snap, err := readSnapshotFile(args[0])
			if err != nil {
				return err
			}
			info, err := raftstore.SeedFromSnapshot(raftstore.SeedConfig{ID: id, DataDir: dataDir, Servers: servers, LogStore: logStore}, snap)
			if err != nil {
				return fmt.Errorf("snapshot restore %s: %w", args[0], err)
			}
			out := struct {
				raftstore.SnapshotInfo
				DataDir string   `json:"data_dir"`
				ID      string   `json:"id"`
				Members []string `json:"members"`
			}{info, dataDir, id, nil}
			for _, s := range servers {
				out.Members = append(out.Members, string(s.ID)+"="+string(s.Address))
			}
			return g.printer.Object(out, func(w io.Writer) {
				fmt.Fprintf(w, "Restored revision %d (index %d, %d keys, %d jobs) into %s for %s; members %s\n",
					info.Revision, info.Index, info.Keys, info.Jobs, dataDir, id, strings.Join(out.Members, ","))
			})
		},
	}
	rf := restore.Flags()
	rf.StringVar(&dataDir, "data-dir", "", "data dir of the new node (must hold no Raft state)")
	rf.StringVar(&id, "id", "", "id of the new node")
	rf.StringVar(&raftAddr, "raft-addr", "127.0.0.1:7001", "advertised Raft address of the new node (without --initial-cluster)")
	rf.StringVar(&logStore, "raft-log-store", raftstore.LogStoreBoltDB, "Raft log store of the new node: boltdb or wal (start the node with the same --raft-log-store)")
	rf.StringSliceVar(&initialCluster, "initial-cluster", nil, "every member of the new cluster as id=raftaddr (the same list on each)")
	c.AddCommand(save, restore, status)
	return c
}

// parseInitialCluster is the first configuration of a restored cluster:
// the --initial-cluster list, or this node alone at raftAddr.
func parseInitialCluster(id, raftAddr string, list []string) ([]raft.Server, error) {
	if len(list) == 0 {
		return []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(raftAddr)}}, nil
	}
	var out []raft.Server
	seen := map[string]bool{}
	for _, m := range list {
		k, v, ok := strings.Cut(m, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("--initial-cluster %q: want id=raftaddr", m)
		}
		if seen[k] {
			return nil, fmt.Errorf("--initial-cluster: %q twice", k)
		}
		seen[k] = true
		out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(k), Address: raft.ServerAddress(v)})
	}
	if !seen[id] {
		return nil, fmt.Errorf("--initial-cluster does not list --id %q", id)
	}
	return out, nil
}

// ErrBadSnapshotFile: a file is not a whole raftps snapshot.
var ErrBadSnapshotFile = errors.New("not a valid raftps snapshot file")

// readSnapshotFile checks the file's checksum and returns the FSM
// snapshot inside.
func readSnapshotFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	snap, err := etcdapi.ParseSnapshot(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w (corrupt or truncated; take a new one with `raftps snapshot save`)", path, ErrBadSnapshotFile, err)
	}
	return snap, nil
}

// inspectSnapshotFile checks a file completely: checksum, then a full
// decode of the FSM snapshot (which also refuses a newer format).
func inspectSnapshotFile(path string) (snapshotSaved, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return snapshotSaved{}, err
	}
	snap, err := readSnapshotFile(path)
	if err != nil {
		return snapshotSaved{}, err
	}
	info, _, err := raftstore.InspectSnapshot(snap)
	if err != nil {
		return snapshotSaved{}, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	abs, _ := filepath.Abs(path)
	return snapshotSaved{Path: abs, SnapshotInfo: info, SHA256: hex.EncodeToString(sum[:]), FileBytes: int64(len(b))}, nil
}
