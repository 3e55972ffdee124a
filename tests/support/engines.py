"""Real engines on SmolLM2's GGUF and llama.cpp's tokenizer as the oracle of prompt ids."""
from __future__ import annotations
from pathlib import Path
from backends.base import LoadOptions


CHATML = "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"


ENGINES = ("llama.cpp", "openvino", "mlx")


class Vocab:
    """llama.cpp's tokenizer for SmolLM2: text <-> ids."""

    def __init__(self, path: Path) -> None:
        import llama_cpp

        self.llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
        self.eos = self.llm.token_eos()

    def ids(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    def chat(self, question: str) -> list[int]:
        return self.ids(CHATML.format(q=question))

    def text(self, ids) -> str:
        return self.llm.detokenize(list(ids)).decode("utf-8", errors="replace")


def _load(engine: str, path: Path, tmp_dir: Path, hosted: bool = True):
    """A loaded backend of ``engine`` with its log under ``tmp_dir``.

    ``hosted``: in its own process, as tokchat runs every engine (:mod:`backends.engine_client`);
    False: the engine's class inside this process.
    """
    options = LoadOptions(log_path=tmp_dir / "engine.log")
    if hosted:
        from backends.engine_client import HostedBackend

        backend = HostedBackend(engine)
    elif engine == "llama.cpp":
        from backends.llama_cpp import LlamaCppBackend

        backend = LlamaCppBackend()
    elif engine == "openvino":
        from backends.openvino import OpenVINOBackend

        backend = OpenVINOBackend()
    else:
        from backends.mlx import MLXBackend

        backend = MLXBackend()
    backend.load(path, options)
    return backend


def load_backend(engine: str, path: Path, log_dir: Path, hosted: bool = True):
    """Load one real backend on ``path``; the caller closes it."""
    return _load(engine, path, log_dir, hosted)
