package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/security"
)

// ErrKeyringPartial: the operation failed on some members (each is named).
var ErrKeyringPartial = errors.New("keyring operation failed on some members")

// newKeyringCmd is `raftps keyring` (Consul's `consul keyring`): the
// gossip encryption keys of every member of a live cluster. A rotation is
// install, use, remove. Keys are read from a file or stdin and named by
// fingerprint afterwards, never given on the command line.
func newKeyringCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "keyring",
		Short: "list, install, use and remove gossip encryption keys on every member",
		Long: `Rotate the gossip key of a live cluster (every member's --gossip-keyring-file
is rewritten):

  raftps keyring generate > new.key            # a new 32-byte key, base64
  raftps keyring install --key-file new.key    # every member can decrypt it
  raftps keyring use 1f2e3d4c                  # every member encrypts with it
  raftps keyring remove 9a8b7c6d               # the old key is gone

Keys are named by fingerprint (raftps keyring list), never by value.`,
	}
	var keyFile string
	run := func(op string, req func(args []string) (*pb.KeyringRequest, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			r, err := req(args)
			if err != nil {
				return err
			}
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				kc := pb.NewKeyringClient(cl.Conn())
				var resp *pb.KeyringResponse
				switch op {
				case "list":
					resp, err = kc.ListKeys(ctx, r)
				case "install":
					resp, err = kc.InstallKey(ctx, r)
				case "use":
					resp, err = kc.UseKey(ctx, r)
				case "remove":
					resp, err = kc.RemoveKey(ctx, r)
				}
				if err != nil {
					return rpcError(err)
				}
				return printKeyring(g, resp)
			})
		}
	}
	list := &cobra.Command{Use: "list", Short: "each member's keys (fingerprints) and primary", Args: cobra.NoArgs,
		RunE: run("list", func([]string) (*pb.KeyringRequest, error) { return &pb.KeyringRequest{}, nil })}
	install := &cobra.Command{Use: "install", Short: "install a key (base64, from --key-file or stdin) on every member", Args: cobra.NoArgs,
		RunE: run("install", func([]string) (*pb.KeyringRequest, error) {
			k, err := readKey(keyFile, os.Stdin)
			return &pb.KeyringRequest{Key: k}, err
		})}
	install.Flags().StringVar(&keyFile, "key-file", "-", "file holding the base64 key (- reads stdin)")
	byFingerprint := func(args []string) (*pb.KeyringRequest, error) {
		return &pb.KeyringRequest{Fingerprint: args[0]}, nil
	}
	use := &cobra.Command{Use: "use FINGERPRINT", Short: "make an installed key the primary on every member", Args: cobra.ExactArgs(1),
		RunE: run("use", byFingerprint)}
	remove := &cobra.Command{Use: "remove FINGERPRINT", Short: "remove a key (not the primary) from every member", Args: cobra.ExactArgs(1),
		RunE: run("remove", byFingerprint)}
	generate := &cobra.Command{Use: "generate", Short: "print a new random 32-byte key, base64 (Consul's keygen)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := security.NewKey()
			if err != nil {
				return err
			}
			fmt.Fprintln(g.out, k)
			return nil
		}}
	c.AddCommand(list, install, use, remove, generate)
	return c
}

// readKey reads one base64 key from path ("-": r).
func readKey(path string, r io.Reader) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(r, 4096))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	return security.ParseKey(strings.TrimSpace(string(b)))
}

func printKeyring(g *globals, resp *pb.KeyringResponse) error {
	var rows [][]string
	var failed []string
	for _, n := range resp.Nodes {
		rows = append(rows, []string{n.Node, n.Primary, strings.Join(n.Fingerprints, ","), n.Error})
		if n.Error != "" {
			failed = append(failed, n.Node+": "+n.Error)
		}
	}
	if err := g.printer.Table(resp, []string{"NODE", "PRIMARY", "KEYS", "ERROR"}, rows); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s", ErrKeyringPartial, strings.Join(failed, "; "))
	}
	return nil
}
