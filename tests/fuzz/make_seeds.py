#!/usr/bin/env python3
"""Regenerates the committed seed corpora in tests/fuzz/corpus/ (small valid inputs the fuzzers
start from). The checkpoint layout is docs/checkpoint.md's; tests/unit/test_checkpoint.c pins
the C writer to the same bytes. Run from anywhere: python3 tests/fuzz/make_seeds.py"""
import gzip
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def align(n):
    return (n + 63) // 64 * 64


def escape(s):
    out = []
    for b in s.encode():
        c = chr(b)
        if c == "\\": out.append("\\\\")
        elif c == "\n": out.append("\\n")
        elif c == "\t": out.append("\\t")
        elif c == "\r": out.append("\\r")
        elif b < 0x20 or b == 0x7F: out.append("\\x%02x" % b)
        else: out.append(c)
    return "".join(out)


def checkpoint(metas, entries):
    """metas: (type, key, value); entries: (name, dtype or None for a blob, shape, bytes)."""
    lines, data, end = [], [], 0
    for kind, key, value in metas:
        if kind == "str": lines.append("str %s %s\n" % (key, escape(value)))
        elif kind == "int": lines.append("int %s %d\n" % (key, value))
        else: lines.append("f64 %s %s\n" % (key, "%.17g" % value))
    for name, dtype, shape, payload in entries:
        offset = align(end)
        data.append((offset, payload))
        end = offset + len(payload)
        crc = zlib.crc32(payload)
        if dtype is None: lines.append("blob %s %d %d %08x\n" % (name, len(payload), offset, crc))
        else: lines.append("tensor %s %s [%s] %d %08x\n" % (name, dtype, ",".join(map(str, shape)), offset, crc))
    header = "".join(lines).encode()
    start = align(32 + len(header))
    total = start + end
    pre = b"LAMPCKPT" + struct.pack("<IIQ", 1, len(header), total)
    crc = zlib.crc32(header, zlib.crc32(pre))
    out = bytearray(pre + struct.pack("<II", crc, 0) + header)
    out += bytes(start - len(out))
    for offset, payload in data:
        out += bytes(start + offset - len(out)) + payload
    return bytes(out)


def write(folder, name, data):
    path = os.path.join(HERE, "corpus", folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main():
    write("checkpoint", "empty.lamp", checkpoint([], []))
    write("checkpoint", "sample.lamp", checkpoint(
        [("int", "step", 1200), ("str", "precision", "fp16"), ("f64", "lr", 0.001)],
        [("0.weight", "f32", [3, 5], struct.pack("<15f", *[i * 0.25 for i in range(15)])),
         ("0.bias", "bf16", [5], struct.pack("<5H", *range(0x3F80, 0x3F85))),
         ("rng", "u64", [4], struct.pack("<4Q", 1, 2, 3, 2**64 - 1)),
         ("scaler", None, None, bytes(range(24)))]))
    write("checkpoint", "types.lamp", checkpoint(
        [("str", "s", "tab\there\nnl \\ \x01"), ("str", "empty", ""), ("int", "neg", -9223372036854775808),
         ("f64", "tiny", 5e-324), ("f64", "inf", float("inf"))],
        [("scalar", "f64", [], struct.pack("<d", 2.5)), ("empty", "i32", [0, 4], b""),
         ("deep", "u8", [1, 2, 1, 2, 1, 2, 1, 2], bytes(range(16))), ("i64", "i64", [2], struct.pack("<2q", -1, 7)),
         ("u32", "u32", [1], b"\x01\x00\x00\x00"), ("f16", "f16", [2], b"\x00\x3c\x00\xc0"),
         ("i.32", "i32", [1], b"\xff\xff\xff\xff"), ("b", None, None, b"")]))
    idx = bytes([0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5]) + bytes((i * 7 + 3) % 256 for i in range(60))
    write("idx", "images.idx", idx)
    write("idx", "labels.idx", bytes([0, 0, 8, 1, 0, 0, 0, 10]) + bytes(range(10)))
    write("idx", "images.idx.gz", gzip.compress(idx, mtime=0))
    records = b""
    for label in (3, 9):
        records += bytes([label]) + bytes((i * 13 + label) % 256 for i in range(3072))
    write("cifar10", "two.bin", records)


if __name__ == "__main__":
    main()
