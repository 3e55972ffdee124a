"""A tiny GGUF writer for tests: header + key/values, no tensors.

Only what the reader tests need: every value type, nested arrays, and a way
to get the raw bytes so tests can corrupt them.
"""
from __future__ import annotations

import struct
from typing import Any

TYPES = {
    "uint8": (0, "B"), "int8": (1, "b"), "uint16": (2, "H"), "int16": (3, "h"), "uint32": (4, "I"),
    "int32": (5, "i"), "float32": (6, "f"), "bool": (7, "?"), "string": (8, None), "array": (9, None),
    "uint64": (10, "Q"), "int64": (11, "q"), "float64": (12, "d"),
}


def gguf_string(s: str | bytes) -> bytes:
    """A GGUF string: its length as uint64, then its bytes."""
    data = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(data)) + data


def _value(vtype: str, value: Any) -> bytes:
    if vtype == "string":
        return gguf_string(value)
    if vtype.startswith("array:"):
        etype = vtype[len("array:"):]
        code = TYPES[etype.split(":")[0]][0]
        return struct.pack("<IQ", code, len(value)) + b"".join(_value(etype, v) for v in value)
    code, fmt = TYPES[vtype]
    return struct.pack("<" + fmt, value)


def build_gguf(kvs: list[tuple[str, str, Any]], version: int = 3, tensor_count: int = 0) -> bytes:
    """GGUF bytes for ``kvs`` = [(key, type, value)]; array types are "array:ELEM" (nestable)."""
    out = [b"GGUF", struct.pack("<IQQ", version, tensor_count, len(kvs))]
    for key, vtype, value in kvs:
        code = TYPES["array"][0] if vtype.startswith("array:") else TYPES[vtype][0]
        out.append(gguf_string(key) + struct.pack("<I", code) + _value(vtype, value))
    return b"".join(out)


def sample_kvs() -> list[tuple[str, str, Any]]:
    """One key of every type, a nested array and a small vocabulary."""
    return [
        ("general.architecture", "string", "llama"),
        ("u8", "uint8", 200), ("i8", "int8", -5), ("u16", "uint16", 60000), ("i16", "int16", -300),
        ("u32", "uint32", 4_000_000_000), ("i32", "int32", -70000), ("f32", "float32", 0.5),
        ("flag", "bool", True), ("u64", "uint64", 2**40), ("i64", "int64", -(2**40)), ("f64", "float64", 0.25),
        ("nested", "array:array:int32", [[1, 2], [3], []]),
        ("words", "array:string", ["a", "ünï", "", "x" * 300]),
        ("tokenizer.ggml.tokens", "array:string", ["<unk>", "<s>", "</s>", "▁a", "a", "b"]),
        ("tokenizer.ggml.scores", "array:float32", [0.0, 0.0, 0.0, -1.0, -2.0, -3.0]),
        ("tokenizer.ggml.token_type", "array:int32", [2, 3, 3, 1, 1, 1]),
        ("tokenizer.ggml.model", "string", "llama"),
    ]
