package security

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrOutsideRoots: a path a client named is not under the node's
// configured roots (or names nothing there). Its message never says which:
// an error that told "no such file" from "outside" would let a client
// probe the node's file system.
var ErrOutsideRoots = errors.New("not under this node's dataset roots")

// ConfinePath resolves p, absolute or relative to a root, to a real path
// under one of roots: it looks at the file system only for a path that is
// lexically inside a root, resolves symbolic links, and refuses a result
// that leaves the root (a link out of it). Every refusal is the same
// ErrOutsideRoots, naming p only.
func ConfinePath(roots []string, p string) (string, error) {
	refuse := fmt.Errorf("dataset.path %q: %w (see the node's --dataset-root)", p, ErrOutsideRoots)
	if p == "" {
		return "", refuse
	}
	for _, root := range roots {
		root, err := filepath.Abs(root)
		if err != nil {
			continue
		}
		cand := p
		if !filepath.IsAbs(cand) {
			cand = filepath.Join(root, cand)
		}
		cand = filepath.Clean(cand)
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if !within(root, cand) && !within(realRoot, cand) {
			continue // not ours: never stat it
		}
		real, err := filepath.EvalSymlinks(cand)
		if err != nil || !within(realRoot, real) {
			return "", refuse
		}
		return real, nil
	}
	return "", refuse
}

// within reports whether p is root or below it (both clean and absolute).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
