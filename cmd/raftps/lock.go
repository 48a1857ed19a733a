package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/raftps/raftps/raftstore/client"
)

// etcdClient is an etcd client v3 over cl's connection: raftps serves
// etcd's KV, Lease and Watch APIs on its gRPC port (raftstore/etcdapi), so
// `raftps lock` and `raftps elect` run etcd's own concurrency.Mutex and
// concurrency.Election, as etcdctl's lock and elect do. Closing it leaves
// cl open.
func etcdClient(ctx context.Context, cl *client.Client) *clientv3.Client {
	c := clientv3.NewCtxClient(ctx)
	conn := cl.Conn()
	c.KV = clientv3.NewKVFromKVClient(etcdpb.NewKVClient(conn), c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(etcdpb.NewLeaseClient(conn), c, 5*time.Second)
	c.Watcher = clientv3.NewWatchFromWatchClient(etcdpb.NewWatchClient(conn), c)
	return c
}

// withEtcdClient runs fn with an etcd client over a new raftps client of
// --endpoints. ctx bounds the whole command (not --timeout: lock and elect
// wait for as long as they must), and ends on SIGINT or SIGTERM.
func (g *globals) withEtcdClient(ctx context.Context, fn func(c *clientv3.Client) error) error {
	cl, err := g.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := g.dial(ctx, cl); err != nil {
		return err
	}
	c := etcdClient(ctx, cl)
	defer c.Close()
	return fn(c)
}

// printKV prints one key and its value (etcdctl's `get` display).
func (g *globals) printKV(kv *clientv3.GetResponse) error {
	if len(kv.Kvs) == 0 {
		return nil
	}
	k, v := string(kv.Kvs[0].Key), string(kv.Kvs[0].Value)
	return g.printer.Object(struct {
		Key         string `json:"key"`
		Value       string `json:"value"`
		ModRevision int64  `json:"mod_revision"`
		Lease       int64  `json:"lease"`
	}{k, v, kv.Kvs[0].ModRevision, kv.Kvs[0].Lease}, func(w io.Writer) { fmt.Fprintf(w, "%s\n%s\n", k, v) })
}

// ErrSessionExpired: the lease of a held lock or won election expired
// (the node did not hear from this process for --ttl seconds); the lock or
// leadership is lost.
var ErrSessionExpired = errors.New("session expired: the lock or leadership was lost")

// newLockCmd is `raftps lock NAME [COMMAND ARGS...]` (etcdctl's lock).
func newLockCmd(g *globals) *cobra.Command {
	ttl := 10
	c := &cobra.Command{
		Use:   "lock NAME [-- COMMAND ARGS...]",
		Short: "acquire a named lock (etcdctl's lock); run COMMAND holding it, or hold it until Ctrl-C",
		Long: `Acquire the lock NAME (etcd's concurrency.Mutex: a key NAME/<lease> on a lease
of --ttl seconds kept alive by this process; holders queue by create revision).
With COMMAND, run it holding the lock, with ETCD_LOCK_KEY and ETCD_LOCK_REV in
its environment, release the lock and exit with COMMAND's exit status.
Without, print the lock's key and hold it until SIGINT or SIGTERM. Put -- before
a COMMAND that has flags of its own (raftps lock NAME -- sh -c '...'), as with
etcdctl.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return g.withEtcdClient(ctx, func(c *clientv3.Client) error {
				s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
				if err != nil {
					return rpcError(err)
				}
				defer s.Close()
				m := concurrency.NewMutex(s, args[0])
				if err := m.Lock(ctx); err != nil {
					return rpcError(err)
				}
				unlock := func() error {
					uctx, cancel := g.ctx(context.WithoutCancel(ctx))
					defer cancel()
					return rpcError(m.Unlock(uctx))
				}
				if len(args) > 1 {
					run := exec.Command(args[1], args[2:]...)
					run.Env = append(os.Environ(), "ETCD_LOCK_KEY="+m.Key(), fmt.Sprintf("ETCD_LOCK_REV=%d", m.Header().Revision))
					run.Stdin, run.Stdout, run.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
					err := run.Run()
					uerr := unlock()
					var ee *exec.ExitError
					if errors.As(err, &ee) {
						return &exitError{code: ee.ExitCode(), err: fmt.Errorf("%s: %w", args[1], err)}
					}
					return errors.Join(err, uerr)
				}
				k, err := c.Get(ctx, m.Key())
				if err != nil {
					return rpcError(err)
				}
				if len(k.Kvs) == 0 {
					return errors.New("lock lost on init")
				}
				if err := g.printKV(k); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return unlock()
				case <-s.Done():
					return ErrSessionExpired
				}
			})
		},
	}
	c.Flags().IntVar(&ttl, "ttl", ttl, "seconds the lock outlives this process if it stops renewing it (the session's lease)")
	return c
}

// newElectCmd is `raftps elect NAME [PROPOSAL]` (etcdctl's elect).
func newElectCmd(g *globals) *cobra.Command {
	var listen bool
	c := &cobra.Command{
		Use:   "elect NAME [PROPOSAL]",
		Short: "campaign in a leader election with PROPOSAL, or observe it with -l (etcdctl's elect)",
		Long: `Campaign in the election NAME (etcd's concurrency.Election) with PROPOSAL as
this candidate's value: wait until elected, print the leader key and PROPOSAL,
and lead until SIGINT or SIGTERM, then resign. With -l (--listen), print each
leader's key and proposal as leadership changes, until SIGINT or SIGTERM.`,
		Args: cobra.RangeArgs(1, 2),
		PreRunE: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && !listen:
				return fmt.Errorf("%w: no proposal argument but -l not set", ErrFlags)
			case len(args) == 2 && listen:
				return fmt.Errorf("%w: proposal given but -l is set", ErrFlags)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return g.withEtcdClient(ctx, func(c *clientv3.Client) error {
				s, err := concurrency.NewSession(c, concurrency.WithContext(ctx))
				if err != nil {
					return rpcError(err)
				}
				defer s.Close()
				e := concurrency.NewElection(s, args[0])
				if listen {
					for resp := range e.Observe(ctx) {
						if err := g.printKV(resp); err != nil {
							return err
						}
					}
					if ctx.Err() == nil {
						return errors.New("elect: observer lost")
					}
					return nil
				}
				if err := e.Campaign(ctx, args[1]); err != nil {
					return rpcError(err)
				}
				resp, err := c.Get(ctx, e.Key())
				if err != nil {
					return rpcError(err)
				}
				if err := g.printKV(resp); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
				case <-s.Done():
					return ErrSessionExpired
				}
				rctx, cancel := g.ctx(context.WithoutCancel(ctx))
				defer cancel()
				return rpcError(e.Resign(rctx))
			})
		},
	}
	c.Flags().BoolVarP(&listen, "listen", "l", false, "observe the election instead of campaigning")
	return c
}
