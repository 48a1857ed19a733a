package main

import (
	"fmt"
	"strconv"
	"time"
)

// millis is a flag of whole milliseconds given as a bare number, as etcd's
// --heartbeat-interval and --election-timeout are ("100", not "100ms").
type millis struct{ p *time.Duration }

func (m millis) String() string {
	if m.p == nil {
		return "0"
	}
	return strconv.FormatInt(m.p.Milliseconds(), 10)
}

func (m millis) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return fmt.Errorf("%q: want a whole number of milliseconds > 0 (e.g. 100)", s)
	}
	*m.p = time.Duration(n) * time.Millisecond
	return nil
}

func (millis) Type() string { return "ms" }
