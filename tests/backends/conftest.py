"""Real engines on SmolLM2's GGUF, each loaded once per test session.

Prompt ids come from llama.cpp's own tokenizer (a vocab-only load of the
same file), so the backends are tested on ids an independent oracle made."""
from __future__ import annotations
from pathlib import Path
import pytest
from support.engines import ENGINES, Vocab, _load


@pytest.fixture(scope="session")
def vocab(smollm_path):
    vocab = Vocab(smollm_path)
    yield vocab
    vocab.llm.close()


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

    from support.assets import cache_dir

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
