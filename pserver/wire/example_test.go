package wire_test

import (
	"fmt"

	"github.com/raftps/raftps/pserver/wire"
)

// Where a dense block and an embedding row live.
func ExampleVShardOfBlock() {
	const vshards, pservers = 64, 3
	v := wire.VShardOfBlock("layer1/w", 5, vshards)
	fmt.Println(v == wire.VShardOfBlock("layer1/w", 4, vshards)+1 || v == 0)
	fmt.Println(wire.SlotOfVShard(v, pservers) == v%pservers)
	// Output:
	// true
	// true
}
