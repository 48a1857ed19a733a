//go:build !raftps_testclock

package raftstore

import "time"

// stampWall is the wall clock (Unix ns) stamped into proposed entries.
func stampWall() int64 { return time.Now().UnixNano() }
