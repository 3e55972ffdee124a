"""The tokenizer tests' oracles, each loaded once per run: ours, llama.cpp's vocab-only model, Hugging
Face ``tokenizers``; the vocabulary GGUFs and llama.cpp's golden cases."""
from __future__ import annotations
import functools
from pathlib import Path
from support.assets import asset_path  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402
from tokenizer.gguf import read_gguf  # noqa: E402


SUPPORTED_MODELS = {"gpt2", "llama", "gemma4", "bert", "t5"}


@functools.lru_cache(maxsize=None)
def ours(path: str):
    """Our tokenizer for ``path``, loaded once."""
    return load_tokenizer(path)


_LLAMA_MODELS: dict[str, object] = {}


def llama(path: str):
    """llama.cpp's vocabulary-only model for ``path``, loaded once."""
    import llama_cpp

    if path not in _LLAMA_MODELS:
        _LLAMA_MODELS[path] = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    return _LLAMA_MODELS[path]


@functools.lru_cache(maxsize=None)
def hf(path: str):
    """Hugging Face ``tokenizers`` for a tokenizer.json, loaded once."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


@functools.lru_cache(maxsize=None)
def vocab_ggufs(models_dir: Path) -> list[Path]:
    """The vocabulary GGUFs of the llama.cpp test assets that use a tokenizer model we implement."""
    found = []
    for p in sorted(models_dir.glob("ggml-vocab-*.gguf")):
        model = read_gguf(p, keys={"tokenizer.ggml.model"}).kv.get("tokenizer.ggml.model")
        if model in SUPPORTED_MODELS:
            found.append(p)
    return found


def model_ggufs() -> list[Path]:
    """The three test models, then every supported vocabulary GGUF."""
    models = [asset_path(n) for n in ("smollm2.gguf", "qwen2.5-coder-0.5b.gguf", "gemma3-270m.gguf")]
    return models + vocab_ggufs(asset_path("llama.cpp-models"))


def golden_cases(gguf: Path) -> list[tuple[str, list[int]]]:
    """(text, ids) pairs from llama.cpp's ``.inp`` / ``.out`` files, read as test-tokenizer-0 reads them.

    Cases in ``.inp`` are separated by "\\n__ggml_vocab_test__\\n"; each line
    of ``.out`` holds the ids of one case, space-separated after a leading
    space (hence the strip).
    """
    raw = Path(str(gguf) + ".inp").read_bytes().decode("utf-8")
    out_lines = Path(str(gguf) + ".out").read_text(encoding="utf-8").split("\n")
    sep = "\n__ggml_vocab_test__\n"
    inputs, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(sep, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(sep)
    assert len(out_lines) >= len(inputs), f"{gguf.name}: fewer .out lines than .inp cases"
    return [(text, [int(x) for x in line.split()]) for text, line in zip(inputs, out_lines)]
