package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTxnCommand (issue 37): kv txn reads etcdctl's txn format from stdin
// (compares, success requests, failure requests, each ended by an empty
// line) and prints etcdctl's result: FAILURE runs the failure requests,
// then SUCCESS the success ones; value, version and create compares and
// get/put/del with their flags work; malformed input is refused.
func TestTxnCommand(t *testing.T) {
	n := mustNode(t)
	ep := []string{"--endpoints", n.GRPCAddr(), "--timeout", "10s", "kv", "txn"}
	txn := `mod("/t/a") > "0"

put /t/a "overwrote a"
get /t/a

put /t/a "created a"
put /t/b 'extra b'

`
	for _, want := range []string{
		"FAILURE\n\nOK\n\nOK\n",
		"SUCCESS\n\nOK\n\n/t/a\noverwrote a\n",
	} {
		out, err, code := runCode(txn, ep...)
		if err != nil || code != 0 || out != want {
			t.Fatalf("kv txn: %q, %v (exit %d); want %q", out, err, code, want)
		}
	}
	for _, c := range []struct{ stdin, want string }{
		{"value(\"/t/b\") = \"extra b\"\nver(\"/t/a\") = \"2\"\nc(\"/t/c\") = \"0\"\n\nget /t/ --prefix --keys-only\ndel /t/b --prev-kv\n\n\n",
			"SUCCESS\n\n/t/a\n\n/t/b\n\n\n1\n/t/b\nextra b\n"},
		{"val(\"/t/b\") = \"extra b\"\n\n\nput /t/c 1 --prev-kv\n\n", "FAILURE\n\nOK\n"},
		{"\n\n", "SUCCESS\n"}, // no compare, no request: etcdctl's too
	} {
		out, err, code := runCode(c.stdin, ep...)
		if err != nil || code != 0 || out != c.want {
			t.Errorf("kv txn <<%q: %q, %v (exit %d); want %q", c.stdin, out, err, code, c.want)
		}
	}
	for _, bad := range []string{
		"mod(/t/a) > 0\n\n\n\n",
		"mod(\"/t/a\") >= \"0\"\n\n\n\n",
		"\nput /t/a\n\n\n",
		"\nget /t/a --prefix --from-key\n\n\n",
	} {
		if _, err, code := runCode(bad, ep...); code != codeInvalidInput || !strings.Contains(err.Error(), "invalid txn input") {
			t.Errorf("kv txn <<%q: exit %d, %v; want exit %d, invalid txn input", bad, code, err, codeInvalidInput)
		}
	}
}

// TestTxnSameAsEtcdctl runs Debian's etcdctl txn (3.4, package
// etcd-client) and raftps kv txn on the same input against the same node
// (etcdctl through the node's etcd API) and wants the same output.
func TestTxnSameAsEtcdctl(t *testing.T) {
	n := mustNode(t)
	input := "val(\"/x/a\") = \"1\"\n\nget /x/a\n\nput /x/a 1\nput /x/b \"two words\"\nget /x/ --prefix\n\n"
	for i := range 2 { // the first run fails the compare, the second passes
		outputs := map[string]string{}
		for _, tool := range []string{"etcdctl", "raftps"} {
			_, err, _ := runCode("", "--endpoints", n.GRPCAddr(), "kv", "del", "/x/", "--prefix")
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				if _, err, _ := runCode("", "--endpoints", n.GRPCAddr(), "kv", "put", "/x/a", "1"); err != nil {
					t.Fatal(err)
				}
			}
			var out string
			if tool == "etcdctl" {
				cmd := exec.Command("etcdctl", "--endpoints", n.GRPCAddr(), "txn")
				cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3")
				cmd.Stdin = strings.NewReader(input)
				b, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("etcdctl txn: %v: %s (install Debian's etcd-client)", err, b)
				}
				out = string(b)
			} else if out, err, _ = runCode(input, "--endpoints", n.GRPCAddr(), "kv", "txn"); err != nil {
				t.Fatal(err)
			}
			outputs[tool] = out
		}
		if outputs["etcdctl"] != outputs["raftps"] {
			t.Errorf("run %d: etcdctl txn printed %q, raftps kv txn %q", i, outputs["etcdctl"], outputs["raftps"])
		}
		t.Logf("run %d: both printed %q", i, outputs["raftps"])
	}
}
