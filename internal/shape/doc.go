// Package shape computes sizes from tensor shapes without overflow. It is a
// leaf (standard library only) so that every place where a shape from a job
// spec, a blob or a file becomes a size (fsm at submit, pserver layouts,
// trainer models, checkpoint export) uses the same checked arithmetic.
package shape
