package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/raftstore/client"
)

// newRootCmd is the raftps command with every subcommand: the one list of
// commands (etcdctl's ctl.go). Each group lives in its own file.
func newRootCmd(out, errOut io.Writer) *cobra.Command {
	g := &globals{out: out, err: errOut}
	root := &cobra.Command{
		Use:           "raftps",
		Short:         "raftps: fault-tolerant parameter-server training on an embedded Raft cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd.Root().PersistentFlags()); err != nil {
				return err
			}
			p, err := newPrinter(g.output, g.out)
			g.printer = p
			return err
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", []string{"127.0.0.1:7000"}, "gRPC endpoints of cluster nodes (host:port,...)")
	pf.DurationVar(&g.timeout, "command-timeout", 10*time.Second, "timeout of one client command (dialing included)")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "alias of --command-timeout")
	_ = pf.MarkHidden("timeout")
	pf.DurationVar(&g.dialTimeout, "dial-timeout", 2*time.Second, "time to wait for a connection to any endpoint")
	pf.StringVarP(&g.output, "output", "o", outputSimple, "output format: simple, json or table")
	pf.StringVarP(&g.output, "write-out", "w", outputSimple, "alias of --output")
	pf.StringVar(&g.tls.files.CA, "cacert", "", "CA certificate of the cluster (PEM; with --cert and --key: mutual TLS)")
	pf.StringVar(&g.tls.files.Cert, "cert", "", "client certificate (PEM; made with raftps tls cert create --client)")
	pf.StringVar(&g.tls.files.Key, "key", "", "client certificate's key (PEM)")

	root.AddCommand(
		withoutClientFlags(newNodeCmd(g)),
		withEtcdctlCodes(newKVCmd(g)),
		withEtcdctlCodes(withLeaseListing(newLeaseCmd(g), g)),
		hiddenAlias(newMembersCmd(g)),
		withEtcdctlCodes(newMemberCmd(g)),
		withEtcdctlCodes(newEndpointCmd(g)),
		newStatusCmd(g),
		newJobCmd(g),
		newTrainCmd(g),
		newCheckpointCmd(g),
		newDemoCmd(g),
		withoutClientFlags(newDevCmd(g)),
		withEtcdctlCodes(newSnapshotCmd(g)),
		newVersionCmd(g),
		withoutClientFlags(newTLSCmd(g)),
		newKeyringCmd(g),
		withEtcdctlCodes(newLockCmd(g)),
		withEtcdctlCodes(newElectCmd(g)),
	)
	envUsage(pf)
	refuseUnknownSubcommands(root)
	flagErrorsAreErrFlags(root)
	return root
}

// hiddenAlias keeps an older spelling of a command working, silently and
// out of the help: `raftps members` is `raftps member list` (the README
// named the old one, whose deprecation notice every reader then saw).
func hiddenAlias(c *cobra.Command) *cobra.Command {
	c.Hidden = true
	return c
}

// globals are the flags every client subcommand shares, and the printer
// of --output (set before any command runs).
type globals struct {
	endpoints []string
	timeout   time.Duration
	// dialTimeout bounds the wait for a connection (--dial-timeout).
	dialTimeout time.Duration
	output      string
	printer     printer
	out, err    io.Writer
	// tls: --cacert, --cert, --key.
	tls clientTLS
}

func (g *globals) client() (*client.Client, error) {
	opts, err := g.tls.dialOptions()
	if err != nil {
		return nil, err
	}
	return client.New(g.endpoints, opts...)
}

// call runs fn with a client of --endpoints and a context bounded by --timeout.
func (g *globals) call(parent context.Context, fn func(ctx context.Context, cl *client.Client) error) error {
	cl, err := g.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := g.ctx(parent)
	defer cancel()
	if err := g.dial(ctx, cl); err != nil {
		return err
	}
	return fn(ctx, cl)
}

func (g *globals) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, g.timeout)
}

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// rpcError turns a gRPC error into a user-facing one that names no Go
// package: the server's sentinels read "fsm: not found: job \"x\"", and
// the user reads `job "x" not found` (NotFound), `job "x" already exists`
// (AlreadyExists) and "Code: message" for the other codes, the package
// prefixes ("fsm: ", "raftstore: ", ...) and the phrase the code already
// says ("invalid argument: ") dropped. The error keeps the gRPC status
// (status.FromError still gives the code).
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := pkgPrefix.ReplaceAllString(s.Message(), "")
	var text string
	switch phrase, said := codePhrase[s.Code()]; {
	case said && strings.HasPrefix(msg, phrase+": ") && (s.Code() == codes.NotFound || s.Code() == codes.AlreadyExists):
		text = strings.TrimPrefix(msg, phrase+": ") + " " + phrase
	case said:
		text = fmt.Sprintf("%s: %s", s.Code(), strings.TrimPrefix(msg, phrase+": "))
	default:
		text = fmt.Sprintf("%s: %s", s.Code(), msg)
	}
	return &userError{text: text, err: err}
}

// pkgPrefix matches the package prefix of the raftps sentinels' messages
// at the start of the message or of one of its ": "-joined parts.
var pkgPrefix = regexp.MustCompile(`(^|: )(fsm|jobq|raftstore|etcdapi|master|checkpoint|pserver|security|schema|client|gossip|node|trainer): `)

// codePhrase is what a sentinel's message says that its code says too.
var codePhrase = map[codes.Code]string{
	codes.NotFound:        "not found",
	codes.AlreadyExists:   "already exists",
	codes.InvalidArgument: "invalid argument",
}

// userError is an RPC error as the CLI shows it, wrapping the original
// (its gRPC status included).
type userError struct {
	text string
	err  error
}

func (e *userError) Error() string { return e.text }
func (e *userError) Unwrap() error { return e.err }

// GRPCStatus keeps the wrapped error's status for status.FromError.
func (e *userError) GRPCStatus() *status.Status { s, _ := status.FromError(e.err); return s }

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
