"""raftps._protowire: the few protobuf wire-format readers the client
decodes by hand (raftps._psconn's tensor messages, errors.py's status
details)."""

from __future__ import annotations


def uvarint(b, i: int) -> tuple[int, int]:
    """The unsigned varint at b[i:] and the index past it; IndexError if
    b ends inside it."""
    shift = result = 0
    while True:
        x = b[i]
        i += 1
        result |= (x & 0x7F) << shift
        if x < 0x80:
            return result, i
        shift += 7


def walk(b):
    """(field number, wire type, value) of each field of message b: an int
    for a varint (wire type 0), b's slice for a length-delimited field (2)
    and for a fixed-width one (1: 8 bytes, 5: 4 bytes); a memoryview b gives
    zero-copy slices. ValueError on a group (wire types 3, 4) or another
    wire type, or truncation."""
    i = 0
    try:
        while i < len(b):
            tag, i = uvarint(b, i)
            num, wt = tag >> 3, tag & 7
            if wt == 0:
                v, i = uvarint(b, i)
            elif wt in (1, 2, 5):
                if wt == 2:
                    n, i = uvarint(b, i)
                else:
                    n = 8 if wt == 1 else 4
                v, i = b[i:i + n], i + n
                if i > len(b):
                    raise ValueError("protobuf: truncated field")
            else:
                raise ValueError(f"protobuf: wire type {wt}")
            yield num, wt, v
    except IndexError:
        raise ValueError("protobuf: truncated varint") from None


def fields(b):
    """(field number, value) of each field of message b: an int for a
    varint, the bytes for a length-delimited field. ValueError on a fixed
    width field (none of the messages read with it has one) or truncation."""
    for num, wt, v in walk(b):
        if wt not in (0, 2):
            raise ValueError(f"protobuf: wire type {wt}")
        yield num, v
