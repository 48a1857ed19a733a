// Command raftps is the one binary of a raftps cluster: `raftps node` runs a
// node; the other subcommands are clients of its gRPC API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(os.Stdout, os.Stderr)
	if cmd, err := root.ExecuteContextC(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "raftps:", err)
		os.Exit(exitCode(err, cmd))
	}
}
