// Package nodetest starts in-process raftps nodes for tests of the
// packages above node (the CLI, the dashboard): one node on free loopback
// ports that leads its own single-node cluster, closed at the test's end.
// Tests of node itself and of the packages node imports cannot use it
// (an import cycle) and keep their own.
package nodetest
