package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrTxnInput: the txn read from stdin is not in etcdctl's format.
var ErrTxnInput = errors.New("invalid txn input")

// newTxnCmd is `raftps kv txn` (etcdctl's txn): compares, success ops
// and failure ops from stdin, each section ended by an empty line, in
// etcdctl's format; prompts for each section when stdin is a terminal or
// with -i.
func newTxnCmd(g *globals) *cobra.Command {
	var interactive bool
	c := &cobra.Command{
		Use:   "txn",
		Short: "apply compares and requests from stdin as one transaction (etcdctl's txn format)",
		Long: `Read a transaction from stdin in etcdctl's format and apply it atomically:
compares, an empty line, the requests to apply if every compare holds, an
empty line, the requests to apply otherwise, an empty line.

  compares:   mod("key1") > "0"     (targets: ver|version, c|create, m|mod,
              val|value, lease (hex); ops: = != < >)
  requests:   put KEY VALUE [--lease=HEXID] [--prev-kv]
              get KEY [--prefix|--from-key] [--limit N] [--keys-only]
              del KEY [--prefix|--from-key] [--prev-kv]

Prints SUCCESS or FAILURE, then each request's result as kv put, get and
del print it. Prompts for each section when stdin is a terminal (or -i).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := cmd.InOrStdin()
			prompt := func(string) {}
			if interactive || isTerminal(in) {
				prompt = func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }
			}
			r := bufio.NewReader(in)
			prompt("compares:")
			cmps, err := readTxnSection(r, parseCompare)
			if err != nil {
				return err
			}
			prompt("success requests (get, put, del):")
			then, err := readTxnSection(r, parseTxnOp)
			if err != nil {
				return err
			}
			prompt("failure requests (get, put, del):")
			els, err := readTxnSection(r, parseTxnOp)
			if err != nil {
				return err
			}
			ctx, cancel := g.ctx(cmd.Context())
			defer cancel()
			return g.withEtcdClient(ctx, func(c *clientv3.Client) error {
				resp, err := c.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) { printTxn(w, resp) })
			})
		},
	}
	c.Flags().BoolVarP(&interactive, "interactive", "i", false, "prompt for each section (the default when stdin is a terminal)")
	return c
}

// isTerminal reports whether r is a character device (a terminal).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// readTxnSection parses lines until an empty line or the end of input.
func readTxnSection[T any](r *bufio.Reader, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for {
		line, err := r.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			return out, nil
		}
		v, perr := parse(line)
		if perr != nil {
			return nil, &exitError{code: codeInvalidInput, err: perr}
		}
		out = append(out, v)
		if err != nil { // EOF after a last line without a newline
			return out, nil
		}
	}
}

// parseCompare parses one compare line (etcdctl's ParseCompare).
func parseCompare(line string) (clientv3.Cmp, error) {
	target, rest, ok := strings.Cut(line, "(")
	var key, op, val string
	if n, err := fmt.Sscanf(rest, "%q) %s %q", &key, &op, &val); !ok || n != 3 || err != nil {
		return clientv3.Cmp{}, fmt.Errorf("%w: malformed compare %q; want target(\"key\") op \"value\", as mod(\"k\") > \"0\"", ErrTxnInput, line)
	}
	switch op {
	case "=", "!=", "<", ">":
	default:
		return clientv3.Cmp{}, fmt.Errorf("%w: compare %q: unknown operator %q (=, !=, < or >)", ErrTxnInput, line, op)
	}
	num := func(base int) (int64, error) {
		v, err := strconv.ParseInt(val, base, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: compare %q: %q is not a number", ErrTxnInput, line, val)
		}
		return v, nil
	}
	var cmp clientv3.Cmp
	var v int64
	var err error
	switch strings.TrimSpace(target) {
	case "ver", "version":
		if v, err = num(10); err == nil {
			cmp = clientv3.Compare(clientv3.Version(key), op, v)
		}
	case "c", "create":
		if v, err = num(10); err == nil {
			cmp = clientv3.Compare(clientv3.CreateRevision(key), op, v)
		}
	case "m", "mod":
		if v, err = num(10); err == nil {
			cmp = clientv3.Compare(clientv3.ModRevision(key), op, v)
		}
	case "val", "value":
		cmp = clientv3.Compare(clientv3.Value(key), op, val)
	case "lease":
		if v, err = num(16); err == nil {
			cmp = clientv3.Compare(clientv3.LeaseValue(key), op, v)
		}
	default:
		return cmp, fmt.Errorf("%w: compare %q: unknown target %q (ver, create, mod, value or lease)", ErrTxnInput, line, target)
	}
	return cmp, err
}

// txnArgs splits a request line as etcdctl's Argify does: words,
// "double-quoted" (Go escapes) and 'single-quoted' strings.
var txnArgs = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'[^']*'|[^'"\s]\S*[^'"\s]?`)

// parseTxnOp parses one request line: put, get or del with kv's flags.
func parseTxnOp(line string) (clientv3.Op, error) {
	args := txnArgs.FindAllString(line, -1)
	for i, a := range args {
		switch a[0] {
		case '\'':
			args[i] = a[1 : len(a)-1]
		case '"':
			s, err := strconv.Unquote(a)
			if err != nil {
				return clientv3.Op{}, fmt.Errorf("%w: request %q: %s: %v", ErrTxnInput, line, a, err)
			}
			args[i] = s
		}
	}
	bad := func(format string, a ...any) (clientv3.Op, error) {
		return clientv3.Op{}, fmt.Errorf("%w: request %q: %s", ErrTxnInput, line, fmt.Sprintf(format, a...))
	}
	if len(args) < 2 {
		return bad("want put KEY VALUE, get KEY or del KEY")
	}
	fs := pflag.NewFlagSet(args[0], pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		prefix, fromKey, keysOnly, prevKV bool
		limit                             int64
		lease                             string
	)
	switch args[0] {
	case "put":
		fs.StringVar(&lease, "lease", "0", "")
		fs.BoolVar(&prevKV, "prev-kv", false, "")
	case "get":
		fs.BoolVar(&prefix, "prefix", false, "")
		fs.BoolVar(&fromKey, "from-key", false, "")
		fs.BoolVar(&keysOnly, "keys-only", false, "")
		fs.Int64Var(&limit, "limit", 0, "")
	case "del", "delete":
		fs.BoolVar(&prefix, "prefix", false, "")
		fs.BoolVar(&fromKey, "from-key", false, "")
		fs.BoolVar(&prevKV, "prev-kv", false, "")
	default:
		return bad("unknown request %q (put, get or del)", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return bad("%v", err)
	}
	rest := fs.Args()
	var opts []clientv3.OpOption
	switch {
	case prefix && fromKey:
		return bad("--prefix and --from-key cannot be set at the same time")
	case prefix:
		opts = append(opts, clientv3.WithPrefix())
	case fromKey:
		opts = append(opts, clientv3.WithFromKey())
	}
	if prevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	switch args[0] {
	case "put":
		if len(rest) != 2 {
			return bad("put takes KEY and VALUE")
		}
		id, err := strconv.ParseInt(lease, 16, 64)
		if err != nil {
			return bad("--lease %q is not a hexadecimal lease id", lease)
		}
		return clientv3.OpPut(rest[0], rest[1], append(opts, clientv3.WithLease(clientv3.LeaseID(id)))...), nil
	case "get":
		if len(rest) != 1 {
			return bad("get takes one KEY")
		}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		return clientv3.OpGet(rest[0], append(opts, clientv3.WithLimit(limit))...), nil
	default:
		if len(rest) != 1 {
			return bad("del takes one KEY")
		}
		return clientv3.OpDelete(rest[0], opts...), nil
	}
}

// printTxn prints a txn's result as etcdctl's simple output does.
func printTxn(w io.Writer, resp *clientv3.TxnResponse) {
	if resp.Succeeded {
		fmt.Fprintln(w, "SUCCESS")
	} else {
		fmt.Fprintln(w, "FAILURE")
	}
	for _, r := range resp.Responses {
		fmt.Fprintln(w)
		switch v := r.Response.(type) {
		case *etcdpb.ResponseOp_ResponsePut:
			fmt.Fprintln(w, "OK")
			if p := v.ResponsePut.PrevKv; p != nil {
				fmt.Fprintf(w, "%s\n%s\n", p.Key, p.Value)
			}
		case *etcdpb.ResponseOp_ResponseRange:
			for _, kv := range v.ResponseRange.Kvs {
				fmt.Fprintf(w, "%s\n%s\n", kv.Key, kv.Value)
			}
		case *etcdpb.ResponseOp_ResponseDeleteRange:
			fmt.Fprintln(w, v.ResponseDeleteRange.Deleted)
			for _, kv := range v.ResponseDeleteRange.PrevKvs {
				fmt.Fprintf(w, "%s\n%s\n", kv.Key, kv.Value)
			}
		}
	}
}
