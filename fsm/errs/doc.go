// Package errs holds the sentinel errors of the raftps state machine.
//
// They live in their own leaf package so that sub-packages of fsm (such as
// fsm/jobq) can wrap them without importing fsm (which imports them). Package
// fsm re-exports every sentinel under the same name; callers outside fsm
// should use the fsm names (fsm.ErrInvalid, ...) and errors.Is.
package errs
