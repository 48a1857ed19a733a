package bench

import (
	"context"
	"os"
	"os/exec"
)

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func runLogged(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
