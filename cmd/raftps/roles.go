package main

import "context"

// openRoles starts the pserver and trainer agents of the node's roles.
func (n *Node) openRoles(ctx context.Context) error {
	return nil
}
