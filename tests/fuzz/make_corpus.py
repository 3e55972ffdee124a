"""Write the seed corpora in ``tests/fuzz/corpus/<target>/`` from the real test assets.

    .venv/bin/python tests/fuzz/make_corpus.py        # rewrites every seed (deterministic)

Real vocabularies are far too big to mutate usefully (a 150k-token GGUF is
megabytes), so each seed is the real file *shrunk*: every key/value kept,
the token arrays cut to the first few hundred ids plus the special tokens,
the merges cut to those whose parts and result survived, special ids
renumbered and chat templates shortened.  Seeds stay under about 20 kB
each and a few hundred kB in all.  The t5 (Unigram) seed gets a small
precompiled charsmap built here (the real one is 237 kB).
"""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tokenizer")]

from fuzz_targets import tests_assets  # noqa: E402
from support.gguf_build import build_gguf, gguf_string  # noqa: E402

from tokenizer.gguf import read_gguf  # noqa: E402

asset_path = tests_assets().asset_path

CORPUS = HERE / "corpus"
BIG = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")


def write_gguf(items: list[tuple[str, str, Any]], tensor_count: int = 0) -> bytes:
    """GGUF bytes for ``items`` = [(key, type, value)] in the reader's type names ("array[ELEM]")."""
    return build_gguf([(key, tname.replace("array[", "array:").replace("]", ""), value) for key, tname, value in items],
                      tensor_count=tensor_count)


def shrink_gguf(path: Path, first: int, extra: range = range(0), merges_cap: int = 240,
                charsmap: bytes | None = None) -> bytes:
    """The file's key/values with the vocabulary cut to ``first`` ids (+ ``extra`` + specials)."""
    g = read_gguf(path)
    kv, types = g.kv, g.types
    tokens = kv["tokenizer.ggml.tokens"]
    ttype = kv.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    special = [i for i, t in enumerate(ttype) if t in (2, 3, 4)]
    keep = sorted(set(range(min(first, len(tokens)))) | set(extra) | set(special[:12]) | set(special[-12:]))
    new_id = {old: new for new, old in enumerate(keep)}
    kept_text = {tokens[i] for i in keep}
    items: list[tuple[str, str, Any]] = []
    for key, value in kv.items():
        tname = types[key]
        if key in BIG:
            if key == "tokenizer.ggml.merges":
                merges = [m for m in value if _merge_fits(m, kept_text)][:merges_cap]
                items.append((key, tname, merges))
            else:
                items.append((key, tname, [value[i] for i in keep]))
        elif key == "tokenizer.ggml.precompiled_charsmap":
            if charsmap is not None:
                items.append((key, "array[uint8]", list(charsmap)))
        elif key.endswith("_token_id"):
            if value in new_id:
                items.append((key, tname, new_id[value]))
        elif tname == "string":
            items.append((key, tname, value[:300]))
        elif tname.startswith("array["):
            items.append((key, tname, value[:16]))
        else:
            items.append((key, tname, value))
    return write_gguf(items, g.tensor_count)


def _merge_fits(merge: str, kept: set[str]) -> bool:
    a, sep, b = merge.partition(" ")
    return bool(sep) and a in kept and b in kept and a + b in kept


def build_charsmap(mapping: dict[str, str]) -> bytes:
    """A precompiled charsmap (XOR-compressed double array + NUL-terminated replacements).

    Unit layout, as llama.cpp's ``xcda_array_view`` reads it: label in bits
    0-7, "has a leaf" in bit 8, the XOR offset to the children in bits 10-31;
    a leaf unit (bit 31 set) holds the replacement's offset.
    """
    trie: dict = {}
    repl = bytearray()
    for key, value in sorted(mapping.items()):
        node = trie
        for b in key.encode("utf-8"):
            node = node.setdefault(b, {})
        node[None] = len(repl)
        repl += value.encode("utf-8") + b"\0"
    units: dict[int, int] = {0: 0}

    def place(pos: int, node: dict) -> None:
        labels = [0 if k is None else k for k in node]
        q = 1
        while any((q ^ c) in units or (q ^ c) == 0 for c in labels):
            q += 1
        for c in labels:
            units[q ^ c] = 0  # reserve
        offset = pos ^ q
        assert offset < 1 << 21
        units[pos] = (units[pos] & 0x3FF) | (offset << 10)
        for k, child in node.items():
            if k is None:
                units[q] = (1 << 31) | child
            else:
                units[q ^ k] = k | ((1 << 8) if None in child else 0)
        for k, child in node.items():
            if k is not None:  # a key end without children still has its leaf unit below it
                place(q ^ k, child)

    place(0, trie)
    # whole 256-unit blocks, as darts-clone writes them: any byte XOR-ed in stays inside the array
    array = [units.get(i, 0) for i in range((max(units) | 0xFF) + 1)]
    blob = struct.pack(f"<{len(array)}I", *array)
    return struct.pack("<I", len(blob)) + blob + bytes(repl)


CHARSMAP = {"\uff21": "A", "\ufb01": "fi", "\u00a0": " ", "\u2460": "1", "e\u0301": "\u00e9", "\u2026": "...",
            "\u216b": "XII", "\u3000": " ", "\uff76": "\u30ab", "\u2028": "\n"}


def gguf_seeds() -> dict[str, bytes]:
    models = asset_path("llama.cpp-models")
    v = lambda n: models / f"ggml-vocab-{n}.gguf"  # noqa: E731
    seeds = {f"{n}.gguf": shrink_gguf(v(n), 320) for n in
             ("qwen2", "llama-bpe", "gpt-2", "starcoder", "qwen35", "deepseek-llm", "falcon", "command-r",
              "deepseek-coder")}
    seeds["gemma-4.gguf"] = shrink_gguf(v("gemma-4"), 480)
    seeds["llama-spm.gguf"] = shrink_gguf(v("llama-spm"), 420)
    seeds["phi-3.gguf"] = shrink_gguf(v("phi-3"), 420)
    seeds["bert-bge.gguf"] = shrink_gguf(v("bert-bge"), 110, range(1000, 1300))
    seeds["t5-charsmap.gguf"] = shrink_gguf(v("nomic-bert-moe"), 400, charsmap=build_charsmap(CHARSMAP))
    seeds["t5-plain.gguf"] = shrink_gguf(v("nomic-bert-moe"), 300)
    seeds["smollm2-model.gguf"] = shrink_gguf(asset_path("smollm2.gguf"), 300)
    return seeds


def gguf_array_seeds(gguf: dict[str, bytes]) -> dict[str, bytes]:
    """Header bytes (offset, count, flags) + a token array + a merge array cut from the seeds."""
    from tokenizer.gguf import parse_gguf

    out = {}
    for name in ("qwen2.gguf", "gpt-2.gguf", "llama-spm.gguf"):
        g = parse_gguf(gguf[name], len(gguf[name]))
        toks = g.kv["tokenizer.ggml.tokens"][:120]
        merges = (g.kv.get("tokenizer.ggml.merges") or [])[:60]
        tok_raw = b"".join(gguf_string(t) for t in toks)
        merge_raw = b"".join(gguf_string(m) for m in merges)
        off = len(tok_raw)
        # 0x01 decode, 0x02 first merge wins; 0x04 a lying count: of tokens, of merges (0x08), by thousands (0x10)
        for flags in (0x01, 0x03, 0x05, 0x0D, 0x15, 0x1D):
            # offset = the cut between the arrays; count = the token count
            out[f"{name[:-5]}-{flags}.bin"] = struct.pack("<HHB", off, len(toks), flags) + tok_raw + merge_raw
    return out


def _shrink_json(data: dict, first: int, merges_cap: int = 300) -> dict:
    model = dict(data["model"])
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        kept = {t: i for t, i in vocab.items() if i < first}
        model["vocab"] = kept
        if "merges" in model:
            merges = []
            for m in model["merges"]:
                a, b = m if isinstance(m, list) else m.split(" ", 1)
                if a in kept and b in kept and a + b in kept:
                    merges.append(m)
            model["merges"] = merges[:merges_cap]
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        model["vocab"] = vocab[:first]
        if model.get("unk_id") is not None and model["unk_id"] >= first:
            model["unk_id"] = 0
    added = [a for a in data.get("added_tokens") or [] if a.get("id", 0) < first or a.get("special")][:12]
    # added tokens keep their ids; a far id is renumbered into the kept range
    for k, a in enumerate(added):
        if a["id"] >= first:
            a = dict(a, id=first + k)
            added[k] = a
    out = dict(data, model=model, added_tokens=added)
    return out


def json_seeds() -> dict[str, bytes]:
    seeds = {}
    for name, path, first in (("qwen2.5", asset_path("qwen2.5-tokenizer") / "tokenizer.json", 400),
                              ("llama3.2", asset_path("llama3.2-tokenizer") / "tokenizer.json", 400),
                              ("minilm", asset_path("minilm-l6-tokenizer.json"), 1200),
                              ("mon-unigram", asset_path("mon-unigram-tokenizer.json"), 400)):
        data = json.loads(path.read_text(encoding="utf-8"))
        seeds[f"{name}.json"] = json.dumps(_shrink_json(data, first), ensure_ascii=False).encode("utf-8")
    # a hand-made one: ByteLevel only, a normalizer sequence, string merges, byte fallback
    bytelevel = {
        "model": {"type": "BPE", "vocab": {c: i for i, c in enumerate("abcdefgh")} | {"ab": 8, "abc": 9, "Ġa": 10,
                                                                                    "Ġ": 11, "<0x41>": 12},
                  "merges": ["a b", "ab c", "Ġ a"], "byte_fallback": True, "ignore_merges": True},
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True},
        "added_tokens": [{"id": 13, "content": "<|end|>", "special": True}, {"id": 14, "content": "<x>",
                                                                               "lstrip": True, "rstrip": True}],
    }
    seeds["tiny-bytelevel.json"] = json.dumps(bytelevel).encode()
    return seeds


def text_seeds() -> list[bytes]:
    """Short texts: the golden inputs of llama.cpp's vocabulary tests, cut into pieces, and edge cases."""
    texts: list[bytes] = []
    inp = asset_path("llama.cpp-models") / "ggml-vocab-qwen35.gguf.inp"
    cases = inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    for k in range(0, len(cases), 3):  # three cases a seed: a few hundred bytes each
        texts.append("".join(cases[k : k + 3]).encode("utf-8")[:400])
    texts += [b"it's 'S 'll '\xc5\xbf", b"<|im_end|><s></s>[INST]<|endoftext|>", b"\xed\xa0\x80 lone \xff\xfe",
              b"\r\n\r\n  \t\t\x0b\x0c 12345678 ", "中文 한국어 العربية e\u0301".encode()]
    return texts[:24]


def main() -> int:
    import fuzz_targets

    gguf = gguf_seeds()
    corpora: dict[str, dict[str, bytes]] = {
        "gguf": gguf,
        "gguf_arrays": gguf_array_seeds(gguf),
        "tokenizer_json": json_seeds(),
    }
    n = len(fuzz_targets.REAL)
    texts = text_seeds()
    corpora["encode"] = {f"text-{i:02d}": bytes([i % n, (i * 3) & 7]) + t for i, t in enumerate(texts)}
    stream = {}
    toks = fuzz_targets.real_tokenizers()
    for i, (name, tok, _) in enumerate(toks):
        ids = tok.encode(texts[i % len(texts)].decode("utf-8", "replace"), special=True)[:60]
        body = b"".join((t % (1 << 24)).to_bytes(3, "little") for t in ids)
        stream[f"{name}.ids"] = bytes([i, i & 1]) + body
    corpora["stream"] = stream
    total = 0
    for target, seeds in corpora.items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, data in seeds.items():
            (folder / name).write_bytes(data)
            total += len(data)
        print(f"{target}: {len(seeds)} seeds, {sum(map(len, seeds.values())):,} bytes")
    print(f"total {total:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
