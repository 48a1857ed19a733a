package main

import (
	"fmt"
	"strconv"

	"github.com/raftps/raftps/schema"
)

// fmtVersion shows a checkpoint version for people: "e1/s3842" for epoch 1,
// step 3842 (version = epoch*schema.EpochStride + step; a rollback starts a
// new epoch), the plain step for epoch 0. Tables and simple output use it;
// -w json keeps the raw number (1000003842).
func fmtVersion(v int64) string {
	if v < schema.EpochStride {
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprintf("e%d/s%d", v/schema.EpochStride, v%schema.EpochStride)
}

// parseVersion reads a checkpoint version as fmtVersion shows it
// ("e1/s3842") or raw ("1000003842", "3842").
func parseVersion(s string) (int64, error) {
	var e, st int64
	if n, err := fmt.Sscanf(s, "e%d/s%d", &e, &st); err == nil && n == 2 && fmtVersion(e*schema.EpochStride+st) == s && e >= 0 && st >= 0 && st < schema.EpochStride {
		return e*schema.EpochStride + st, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("version %q: want a number (1000003842) or epoch/step as shown (e1/s3842)", s)
	}
	return v, nil
}
