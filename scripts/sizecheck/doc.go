// Package main is the command sizecheck, which keeps the size rules of
// DESIGN.md (issue 36): no non-generated, non-test Go file over 800 lines
// and no function over 120.
// It lists every file over -max-file lines and every function over
// -max-func lines, and exits 1 if it lists any, so a review or CI step can
// run it:
//
//	go run ./scripts/sizecheck                          # from the module root
//	go run ./scripts/sizecheck -root ./node -max-func 80
//
// A function's length is from its func keyword to its closing brace.
// Generated files (a "Code generated ... DO NOT EDIT." line, go/ast's
// IsGenerated) and _test.go files are skipped, as are vendor and dot
// directories. When a file is too long, split it by concern (as pserver's
// slot.go became slot, pull, push, pushid and syncstep); when a function
// is, split it into named steps (as Node.Open became openListeners,
// openGossip, openStore, ...).
package main
