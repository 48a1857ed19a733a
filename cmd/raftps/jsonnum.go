package main

import (
	"bytes"
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoJSON is m in the one JSON shape (see printer.go): protojson with
// proto field names and zero values, except that 64-bit integers are JSON
// numbers, as in encoding/json's output of the CLI's own structs and as
// etcdctl prints them; protojson quotes them ("id": "7587...") so that
// JavaScript keeps every digit, and `lease grant -w json` and `member list
// -w json` gave strings where `kv get -w json` gave numbers. Keys come out
// sorted. Well-known types (Timestamp, Duration, ...) keep protojson's
// form.
func protoJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.MarshalIndent(numbers(m.ProtoReflect().Descriptor(), v), "", "  ")
}

// numbers turns the quoted 64-bit integers of v, the protojson form of a
// message md, into json.Number, at every depth.
func numbers(md protoreflect.MessageDescriptor, v any) any {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return v
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		val, ok := obj[string(fd.Name())]
		if !ok {
			continue
		}
		switch {
		case fd.IsMap():
			if m, ok := val.(map[string]any); ok {
				for k, e := range m {
					m[k] = value(fd.MapValue(), e)
				}
			}
		case fd.IsList():
			if l, ok := val.([]any); ok {
				for k, e := range l {
					l[k] = value(fd, e)
				}
			}
		default:
			obj[string(fd.Name())] = value(fd, val)
		}
	}
	return obj
}

// value is one protojson value of field fd with 64-bit integers as numbers.
func value(fd protoreflect.FieldDescriptor, v any) any {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if s, ok := v.(string); ok {
			return json.Number(s)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return numbers(fd.Message(), v)
	}
	return v
}
