package main

import (
	"fmt"

	"github.com/dustin/go-humanize"
)

// byteSize is a flag of bytes with units ("512MiB", "4GB", "1073741824";
// humanize.ParseBytes: KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024).
type byteSize struct{ p *uint64 }

func (b byteSize) String() string {
	if b.p == nil {
		return "0"
	}
	return humanize.IBytes(*b.p)
}

func (b byteSize) Set(s string) error {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("%q: want bytes with an optional unit (512MiB, 4GB, 1073741824)", s)
	}
	if n == 0 {
		return fmt.Errorf("%q: must be > 0", s)
	}
	*b.p = n
	return nil
}

func (byteSize) Type() string { return "bytes" }
