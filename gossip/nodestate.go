package gossip

import (
	"reflect"
	"unsafe"

	"github.com/hashicorp/memberlist"
)

// memberlist v0.6.0 never fills in Node.State: its own state lives in the
// unexported nodeState struct that embeds Node and shadows that field, and
// the EventDelegate gets &nodeState.Node. So NotifyLeave cannot tell a
// graceful leave (StateLeft) from a failure (StateDead) through the public
// API. nodeStateOf reads nodeState.State instead. It is only valid for the
// *Node that memberlist passes to EventDelegate methods and to the
// "existing" argument of NotifyConflict, which memberlist calls with its
// node lock held, so the read does not race.
//
// The layout is checked with reflection at start-up, not assumed: if a
// future memberlist changes it, stateOffsetOK is false, nodeStateOf falls
// back to Node.State, and TestGracefulLeave fails (every leave would be
// reported as a failure).
var stateOffset, stateOffsetOK = nodeStateOffset()

func nodeStateOffset() (uintptr, bool) {
	f, ok := reflect.TypeFor[memberlist.Memberlist]().FieldByName("nodeMap")
	if !ok || f.Type.Kind() != reflect.Map || f.Type.Elem().Kind() != reflect.Pointer {
		return 0, false
	}
	ns := f.Type.Elem().Elem() // memberlist.nodeState
	if ns.Kind() != reflect.Struct || ns.NumField() == 0 {
		return 0, false
	}
	if first := ns.Field(0); !first.Anonymous || first.Type != reflect.TypeFor[memberlist.Node]() || first.Offset != 0 {
		return 0, false
	}
	sf, ok := ns.FieldByName("State")
	if !ok || len(sf.Index) != 1 || sf.Type != reflect.TypeFor[memberlist.NodeStateType]() {
		return 0, false
	}
	return sf.Offset, true
}

// nodeStateOf returns memberlist's state of the node n belongs to; see
// stateOffset for when that is valid.
func nodeStateOf(n *memberlist.Node) memberlist.NodeStateType {
	if !stateOffsetOK {
		return n.State
	}
	return *(*memberlist.NodeStateType)(unsafe.Add(unsafe.Pointer(n), stateOffset))
}
