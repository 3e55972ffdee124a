"""Real engines on SmolLM2's GGUF, each loaded once per test session.

Prompt ids come from llama.cpp's own tokenizer (a vocab-only load of the
same file), so the backends are tested on ids an independent oracle made.
"""
from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def vocab(smollm_path):
    vocab = Vocab(smollm_path)
    yield vocab
    vocab.llm.close()


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


@pytest.fixture(scope="session", params=ENGINES)
def backend(request, smollm_path, tmp_path_factory):
    """Each real backend in turn on SmolLM2, loaded once.

    Session scope with params makes pytest run all tests of one engine
    together and close it before loading the next: engines that share two
    cores slow each other down (their idle worker threads keep spinning).
    """
    loaded = _load(request.param, smollm_path, tmp_path_factory.mktemp("engine-logs"))
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def smollm_mlx_dir(smollm_path) -> Path:
    """SmolLM2 as an MLX model directory, built once from the GGUF asset and cached beside the assets.

    mlx-lm's own ``save_model``/``save_config`` write the model tokchat builds
    from the GGUF (:mod:`backends.mlx_export`), with the GGUF's tokenizer as
    tokenizer.json.  Built in a child process (MLX keeps per-thread streams)
    into a temporary name, then renamed; rebuilt when mlx-lm's version changes.
    """
    import importlib.metadata
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from assets import cache_dir

    target = cache_dir() / "smollm2-mlx"
    marker = cache_dir() / ".smollm2-mlx.ok"
    stamp = f"mlx-lm {importlib.metadata.version('mlx-lm')}\n"
    if marker.exists() and marker.read_text() == stamp and target.is_dir():
        return target
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        built = Path(tmp) / "smollm2-mlx"
        subprocess.run(
            [sys.executable, "-c", "import sys; from backends.mlx_export import export_mlx_dir; "
             "from backends.mlx import clear_thread_streams; export_mlx_dir(sys.argv[1], sys.argv[2]); "
             "clear_thread_streams()", str(smollm_path), str(built)],
            check=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
        if target.exists():
            shutil.rmtree(target)
        built.rename(target)
    marker.write_text(stamp)
    return target
