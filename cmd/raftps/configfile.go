package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// ErrConfigFile is wrapped by every error of a --config-file.
var ErrConfigFile = errors.New("config file")

// applyConfigFile sets the flags of fs from the YAML file at path, whose
// keys are the flags' names (etcd's --config-file):
//
//	id: n1
//	data-dir: /var/lib/raftps
//	join: [raftps-0.raftps:7002, raftps-1.raftps:7002]
//	bootstrap-expect: 3
//
// A flag given on the command line wins over the file. An unknown key, a
// key that is not a scalar or a list of scalars, or a value the flag
// refuses is an error naming the file and the key; nothing is half
// applied to the node, which does not start.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfigFile, err)
	}
	var doc map[string]yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%w %s: %w", ErrConfigFile, path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || k == "config-file" {
			return fmt.Errorf("%w %s: unknown key %q (keys are the flags of `raftps node`, e.g. id, data-dir, join)", ErrConfigFile, path, k)
		}
		v := doc[k]
		var val string
		switch v.Kind {
		case yaml.ScalarNode:
			val = v.Value
		case yaml.SequenceNode:
			var items []string
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return fmt.Errorf("%w %s: key %q, line %d: want a list of strings", ErrConfigFile, path, k, it.Line)
				}
				items = append(items, it.Value)
			}
			val = strings.Join(items, ",")
		default:
			return fmt.Errorf("%w %s: key %q, line %d: want a value or a list", ErrConfigFile, path, k, v.Line)
		}
		if f.Changed {
			continue // the command line overrides the file
		}
		if err := f.Value.Set(val); err != nil {
			return fmt.Errorf("%w %s: key %q, line %d: %w", ErrConfigFile, path, k, v.Line, err)
		}
	}
	return nil
}
