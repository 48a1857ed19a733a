package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes. The commands that mirror etcdctl (kv, lease, member,
// endpoint, snapshot, lock, elect: those marked etcdctlCodes) exit with
// etcdctl's codes; the job commands (train, demo, checkpoint verify) keep
// their result codes 2-5, which say what happened to the job, not to the
// connection. cmd/raftps/doc.go holds the table.
const (
	codeOK           = 0
	codeError        = 1   // any other error (etcdctl's ExitError)
	codeBadConn      = 2   // no node answered (etcdctl's ExitBadConnection)
	codeInvalidInput = 3   // malformed input, as a txn on stdin (etcdctl's ExitInvalidInput)
	codeBadFeature   = 4   // the cluster does not serve the request (etcdctl's ExitBadFeature)
	codeInterrupted  = 5   // etcdctl's ExitInterrupted (unused by raftps)
	codeIO           = 6   // etcdctl's ExitIO (unused by raftps)
	codeBadArgs      = 128 // bad flags or arguments (etcdctl's ExitBadArgs)

	codeJobFailed    = 2 // train: the job failed or was cancelled
	codeBelowTarget  = 3 // train: final accuracy below --target-accuracy
	codeDemoFault    = 4 // demo: a fault was not survived
	codeVerifyFailed = 5 // checkpoint verify: mismatches
)

// etcdctlCodes is the annotation of the commands that exit with
// etcdctl's codes (set on a command, it holds for its subcommands).
const etcdctlCodes = "raftps.etcdctl-exit-codes"

// exitCode is the process exit code of err, returned by the command cmd
// (nil: unknown): an exitError's own code; for a command with etcdctl's
// codes (etcdctlCodes on it or a parent), codeBadArgs for a flag or
// argument error (ErrFlags), codeBadConn when no node answered (ErrDial,
// or Unavailable), codeBadFeature for Unimplemented; codeError otherwise.
func exitCode(err error, cmd *cobra.Command) int {
	var ee *exitError
	switch {
	case err == nil:
		return codeOK
	case errors.As(err, &ee):
		return ee.code
	case !hasEtcdctlCodes(cmd):
		return codeError
	case errors.Is(err, ErrFlags):
		return codeBadArgs
	case errors.Is(err, ErrDial):
		return codeBadConn
	}
	switch s, _ := status.FromError(err); s.Code() {
	case codes.Unavailable:
		return codeBadConn
	case codes.Unimplemented:
		return codeBadFeature
	}
	return codeError
}

func hasEtcdctlCodes(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Annotations[etcdctlCodes] != "" {
			return true
		}
	}
	return false
}

// withEtcdctlCodes marks c (and its subcommands) as exiting with
// etcdctl's codes.
func withEtcdctlCodes(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[etcdctlCodes] = "true"
	return c
}

// flagErrorsAreErrFlags makes every flag and positional-argument error of
// root's commands wrap ErrFlags (etcdctl's ExitBadArgs).
func flagErrorsAreErrFlags(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %w", ErrFlags, err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil && !errors.Is(err, ErrFlags) {
					return fmt.Errorf("%w: %w", ErrFlags, err)
				} else if err != nil {
					return err
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
