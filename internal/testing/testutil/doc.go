// Package testutil holds the helpers every package's tests share: a
// logger that writes to the test's log, and the module root.
//
//	log := testutil.Logger(t)                  // slog at Warn, to t.Log
//	log := testutil.LoggerLevel(t, slog.LevelDebug)
//	root, err := testutil.ModuleRoot()         // the directory of go.mod
//
// It does not import package testing (TB is the subset it needs), so a
// command may use ModuleRoot too.
package testutil
