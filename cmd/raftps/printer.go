package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/proto"
)

// Output formats of --output/-o (alias --write-out/-w), as etcdctl's.
//
// The one JSON shape: every command prints one JSON object per result on
// stdout, with snake_case keys at every depth (protojson with proto field
// names and zero values for API messages; encoding/json with snake_case
// tags for the rest). A list is a field of that object ("members", "kvs",
// "versions", "endpoints", "mismatches", ...), never a bare array or null.
// A streaming command (kv watch, lease keepalive) prints one such object per
// event, one after another: a stream of JSON values, as jq and
// json.Decoder read it. Errors go to stderr with a non-zero exit and print
// nothing on stdout; progress bars and notes (train, lease grant) go to
// stderr too; `train` detached with Ctrl-C prints nothing on stdout.
// TestEveryCommandJSON and TestOpsCommandsJSON check it command by command.
const (
	outputSimple = "simple" // for people: the default
	outputJSON   = "json"   // for programs: indented JSON, proto field names
	outputTable  = "table"  // aligned columns between borders
)

// printer writes the result of a command in the --output format; every
// command prints through it (etcdctl's printer.go).
type printer interface {
	// Object prints one result v. json marshals v (protojson for a
	// proto.Message, with proto field names and zero values; encoding/json
	// otherwise); simple and table call text, which writes the human form.
	Object(v any, text func(w io.Writer)) error
	// Table prints rows under header; json marshals v instead. simple
	// aligns the columns; table also draws borders.
	Table(v any, header []string, rows [][]string) error
}

// newPrinter returns the printer of format ("" is simple), or an error
// naming the known formats.
func newPrinter(format string, w io.Writer) (printer, error) {
	switch format {
	case "", outputSimple:
		return simplePrinter{w}, nil
	case outputJSON:
		return jsonPrinter{w}, nil
	case outputTable:
		return tablePrinter{simplePrinter{w}}, nil
	}
	return nil, fmt.Errorf("--output %q: want %s, %s or %s", format, outputSimple, outputJSON, outputTable)
}

type simplePrinter struct{ w io.Writer }

func (p simplePrinter) Object(_ any, text func(io.Writer)) error {
	text(p.w)
	return nil
}

func (p simplePrinter) Table(_ any, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

type tablePrinter struct{ simplePrinter }

func (p tablePrinter) Table(_ any, header []string, rows [][]string) error {
	width := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], len(c))
			}
		}
	}
	var b strings.Builder
	rule := func() {
		for _, w := range width {
			b.WriteString("+" + strings.Repeat("-", w+2))
		}
		b.WriteString("+\n")
	}
	line := func(cells []string) {
		for i, w := range width {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			fmt.Fprintf(&b, "| %-*s ", w, c)
		}
		b.WriteString("|\n")
	}
	rule()
	line(header)
	rule()
	for _, r := range rows {
		line(r)
	}
	rule()
	_, err := io.WriteString(p.w, b.String())
	return err
}

type jsonPrinter struct{ w io.Writer }

func (p jsonPrinter) Object(v any, _ func(io.Writer)) error { return p.print(v) }

func (p jsonPrinter) Table(v any, _ []string, _ [][]string) error { return p.print(v) }

func (p jsonPrinter) print(v any) error {
	var b []byte
	var err error
	if m, ok := v.(proto.Message); ok {
		b, err = protoJSON(m)
	} else {
		b, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(p.w, string(b))
	return err
}
