package raftstore

// TestClockTag is the build tag that compiles the test clock in
// (testclock_on.go): `go build -tags raftps_testclock ./cmd/raftps`. The
// Jepsen suite builds its node binary with it; a binary built without it
// (every release and `make build`) stamps time.Now() and reads no
// environment variable (testclock_off.go).
const TestClockTag = "raftps_testclock"

// TestClockOffsetEnv names an environment variable that, in a binary built
// with TestClockTag, names a file holding a Go duration ("1h", "-30m",
// "0s"). The duration is added to the wall clock this node stamps into the
// Raft entries it proposes (Entry.now_unix_nano), and the file is re-read
// at most every 100 ms, so a test steps a running leader's clock by
// rewriting the file (the Jepsen suite's clock-step scenario). Unset (the
// default), the stamp is time.Now() and no file is read. A missing or
// unparsable file means no offset. Monotonic stamps (Entry.mono_nano) are
// never offset: they are what the replicated clock advances by
// (fsm/clock.go).
const TestClockOffsetEnv = "RAFTPS_TEST_CLOCK_OFFSET_FILE"
