package schema

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// unmarshalOpts reads protojson records written by newer versions too.
var unmarshalOpts = protojson.UnmarshalOptions{DiscardUnknown: true}

// SlotRecord is the JSON value of SlotKey: which node serves a pserver
// slot, at which gRPC address, and the claim's incarnation (the key's
// create_revision; 0 until the claiming pserver has written it back).
type SlotRecord struct {
	Node        string `json:"node"`
	Addr        string `json:"addr"`
	Incarnation int64  `json:"incarnation"`
}

// Marshal encodes r as the key's value.
func (r SlotRecord) Marshal() []byte { b, _ := json.Marshal(r); return b }

// ParseSlotRecord decodes a SlotKey value.
func ParseSlotRecord(b []byte) (SlotRecord, error) {
	var r SlotRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return SlotRecord{}, fmt.Errorf("schema: slot record: %w", err)
	}
	return r, nil
}

// TrainerRecord is the JSON value of TrainerKey: the node that runs a
// trainer and that node's gRPC address.
type TrainerRecord struct {
	Node string `json:"node"`
	Addr string `json:"addr"`
}

// Marshal encodes r as the key's value.
func (r TrainerRecord) Marshal() []byte { b, _ := json.Marshal(r); return b }

// ParseTrainerRecord decodes a TrainerKey value.
func ParseTrainerRecord(b []byte) (TrainerRecord, error) {
	var r TrainerRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return TrainerRecord{}, fmt.Errorf("schema: trainer record: %w", err)
	}
	return r, nil
}

// NodeOf returns the "node" field of a slot or trainer record (both carry
// it), for code that handles either kind.
func NodeOf(b []byte) (string, bool) {
	var r struct {
		Node string `json:"node"`
	}
	if json.Unmarshal(b, &r) != nil || r.Node == "" {
		return "", false
	}
	return r.Node, true
}

// NodeRecord is the JSON value of NodeKey, written by the master from gossip.
type NodeRecord struct {
	ID       string   `json:"id"`
	Roles    []string `json:"roles"`
	GRPCAddr string   `json:"grpc_addr"`
	RaftAddr string   `json:"raft_addr"`
	HTTPAddr string   `json:"http_addr"`
	Status   string   `json:"status"`
}

// Marshal encodes r as the key's value.
func (r NodeRecord) Marshal() []byte { b, _ := json.Marshal(r); return b }

// ParseNodeRecord decodes a NodeKey value.
func ParseNodeRecord(b []byte) (NodeRecord, error) {
	var r NodeRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return NodeRecord{}, fmt.Errorf("schema: node record: %w", err)
	}
	return r, nil
}

// Rollback is the JSON value of RollbackKey.
type Rollback struct {
	Version int64  `json:"version"`
	Slot    int32  `json:"slot"`
	Node    string `json:"node"`
	// Epoch is the trajectory that starts at Version: versions written
	// after the rollback are labelled with it (EpochStride).
	Epoch int64 `json:"epoch"`
}

// Marshal encodes r as the key's value.
func (r Rollback) Marshal() []byte { b, _ := json.Marshal(r); return b }

// ParseRollback decodes a RollbackKey value.
func ParseRollback(b []byte) (Rollback, error) {
	var r Rollback
	if err := json.Unmarshal(b, &r); err != nil {
		return Rollback{}, fmt.Errorf("schema: rollback: %w", err)
	}
	return r, nil
}

// MarshalPointer encodes a CheckpointKey value (protojson).
func MarshalPointer(p *pb.CheckpointPointer) ([]byte, error) { return protojson.Marshal(p) }

// ParsePointer decodes a CheckpointKey value.
func ParsePointer(b []byte) (*pb.CheckpointPointer, error) {
	p := &pb.CheckpointPointer{}
	if err := unmarshalOpts.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("schema: checkpoint pointer: %w", err)
	}
	return p, nil
}

// MarshalRestore encodes a RestoreKey value (protojson).
func MarshalRestore(r *pb.RestoreRecord) ([]byte, error) { return protojson.Marshal(r) }

// ParseRestore decodes a RestoreKey value.
func ParseRestore(b []byte) (*pb.RestoreRecord, error) {
	r := &pb.RestoreRecord{}
	if err := unmarshalOpts.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("schema: restore record: %w", err)
	}
	return r, nil
}
