package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/connectivity"

	"github.com/raftps/raftps/raftstore/client"
)

// envPrefix: every client flag --foo-bar can be set with RAFTPS_FOO_BAR
// (etcdctl's ETCDCTL_*); a flag on the command line wins.
const envPrefix = "RAFTPS_"

// envName is the environment variable of flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagsFromEnv sets each flag of fs not given on the command line from its
// environment variable, if set; a value the flag refuses is an error
// naming the variable.
func flagsFromEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Hidden {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, serr)
		}
	})
	return err
}

// envUsage makes --help name each flag's environment variable (of the
// flags names, or every visible flag of fs when none are named) and show
// the variable's value as the flag's default when it is set, as that is
// the value the flag takes.
func envUsage(fs *pflag.FlagSet, names ...string) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || len(names) > 0 && !slices.Contains(names, f.Name) {
			return
		}
		f.Usage += " (env " + envName(f.Name) + ")"
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			f.DefValue = v
		}
	})
}

// withoutClientFlags leaves the client flags (the root's persistent
// ones: --endpoints, --cacert, ...) out of the help of c and its
// subcommands, which do not use them (node, tls, dev).
func withoutClientFlags(c *cobra.Command) *cobra.Command {
	c.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		var shown []*pflag.Flag
		cmd.Root().PersistentFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				f.Hidden = true
				shown = append(shown, f)
			}
		})
		defer func() {
			for _, f := range shown {
				f.Hidden = false
			}
		}()
		cmd.Root().HelpFunc()(cmd, args)
	})
	return c
}

// ErrDial: no endpoint could be reached within --dial-timeout.
var ErrDial = errors.New("no endpoint reachable")

// dial waits until cl is connected to some endpoint, at most
// --dial-timeout (and within ctx, bounded by --command-timeout).
func (g *globals) dial(ctx context.Context, cl *client.Client) error {
	if g.dialTimeout <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	conn := cl.Conn()
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, s) {
			hint := ""
			if !g.tls.files.Enabled() {
				hint = "; if the cluster runs TLS, give --cacert, --cert and --key (or RAFTPS_CACERT, RAFTPS_CERT, RAFTPS_KEY)"
			}
			return fmt.Errorf("%w: %s within --dial-timeout %s (last state %s%s)", ErrDial, strings.Join(cl.Endpoints, ","), g.dialTimeout, s, hint)
		}
	}
}

// ErrUnknownCommand: a group command was given a subcommand it does not have.
var ErrUnknownCommand = errors.New("unknown command")

// refuseUnknownSubcommands makes every group command (one without its own
// Run) fail on an argument it does not know, as etcdctl does, instead of
// printing its help and exiting 0; with no argument it prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w %q for %q; see %q", ErrUnknownCommand, args[0], cmd.CommandPath(), cmd.CommandPath()+" --help")
		}
		return cmd.Help()
	}
}
