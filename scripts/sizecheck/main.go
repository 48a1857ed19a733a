package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	root := flag.String("root", ".", "directory to walk")
	maxFile := flag.Int("max-file", 800, "most lines a file may have")
	maxFunc := flag.Int("max-func", 120, "most lines a function may have")
	flag.Parse()
	over, err := check(*root, *maxFile, *maxFunc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sizecheck:", err)
		os.Exit(2)
	}
	for _, o := range over {
		fmt.Println(o)
	}
	if len(over) > 0 {
		os.Exit(1)
	}
}

// check returns one line per file over maxFile lines and per function
// over maxFunc lines under root, as "path:line: what (n lines)".
func check(root string, maxFile, maxFunc int) ([]string, error) {
	var over []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFile {
			over = append(over, fmt.Sprintf("%s:1: file (%d lines)", p, n))
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > maxFunc {
				over = append(over, fmt.Sprintf("%s:%d: func %s (%d lines)", p, start.Line, fd.Name.Name, n))
			}
		}
		return nil
	})
	return over, err
}
