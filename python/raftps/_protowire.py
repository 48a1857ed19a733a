"""raftps._protowire: the few protobuf wire-format readers the client
decodes by hand (ps.py's tensor messages, errors.py's status details)."""

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


def fields(b):
    """(field number, value) of each field of message b: an int for a
    varint, the bytes for a length-delimited field. ValueError on a fixed
    width field (none of the messages read with it has one) or truncation."""
    i = 0
    try:
        while i < len(b):
            tag, i = uvarint(b, i)
            num, wt = tag >> 3, tag & 7
            if wt == 0:
                v, i = uvarint(b, i)
            elif wt == 2:
                n, i = uvarint(b, i)
                v, i = b[i:i + n], i + n
                if i > len(b):
                    raise ValueError("protobuf: truncated field")
            else:
                raise ValueError(f"protobuf: wire type {wt}")
            yield num, v
    except IndexError:
        raise ValueError("protobuf: truncated varint") from None
