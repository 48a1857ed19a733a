package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestSubmitExternalSpecFile: a spec file of the external model keeps the
// params it lists (the CLI used to refuse it: `model: unknown model
// "external"`), and `job submit --help` names the external model.
func TestSubmitExternalSpecFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "spec.yaml")
	spec := `name: exp-1
model: {name: external}
params:
  - {name: fc.weight, shape: [10, 784], init: INIT_GLOROT}
  - {name: fc.bias, shape: [10]}
`
	if err := os.WriteFile(f, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cobra.Command{Use: "submit"}
	sf := &specFlags{}
	sf.register(c)
	if err := c.ParseFlags([]string{"--file", f}); err != nil {
		t.Fatal(err)
	}
	got, err := sf.build(c)
	if err != nil {
		t.Fatalf("build external spec: %v", err)
	}
	if got.Model.Name != "external" || len(got.Params) != 2 || got.Params[0].Name != "fc.weight" ||
		len(got.Params[0].Shape) != 2 || got.Params[0].Shape[1] != 784 || got.Params[1].Name != "fc.bias" {
		t.Fatalf("external spec: model %q, params %v", got.Model.Name, got.Params)
	}

	var out bytes.Buffer
	root := newRootCmd(&out, &out)
	root.SetArgs([]string{"job", "submit", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "external") || !strings.Contains(out.String(), "params:") {
		t.Fatalf("job submit --help does not explain the external model:\n%s", out.String())
	}
}
