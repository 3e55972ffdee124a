"""Session-wide caches so each model and each oracle loads once per test run.

Loading a 150k-token vocabulary takes about a second for us and for
llama.cpp alike, and many test modules need the same models, so everything
is memoized here.  The vocabulary GGUFs are found by reading their headers:
every ``ggml-vocab-*.gguf`` whose tokenizer model we implement takes part:
all 19 of them (gpt2, llama, gemma4, bert and t5)."""
from __future__ import annotations
from pathlib import Path
import pytest
from support.assets import asset_path  # noqa: E402
from support.tokenizer_oracles import ours, _LLAMA_MODELS, llama, vocab_ggufs, model_ggufs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``any_gguf``: every GGUF we test against llama.cpp; ``golden_gguf``: those with .inp/.out files."""
    if "any_gguf" in metafunc.fixturenames:
        paths = model_ggufs()
        metafunc.parametrize("any_gguf", paths, ids=[p.name for p in paths])
    if "golden_gguf" in metafunc.fixturenames:
        paths = [p for p in vocab_ggufs(asset_path("llama.cpp-models")) if Path(str(p) + ".inp").exists()]
        metafunc.parametrize("golden_gguf", paths, ids=[p.name for p in paths])
    if "json_dir" in metafunc.fixturenames:
        dirs = [asset_path("qwen2.5-tokenizer"), asset_path("llama3.2-tokenizer")]
        metafunc.parametrize("json_dir", dirs, ids=[d.name for d in dirs])


@pytest.fixture(scope="session", autouse=True)
def _close_llama_models():
    """Free llama.cpp models before interpreter shutdown (their __del__ fails late in teardown)."""
    yield
    for model in _LLAMA_MODELS.values():
        model.close()
    _LLAMA_MODELS.clear()


@pytest.fixture(scope="session")
def qwen_tok(qwen_path):
    return ours(str(qwen_path))


@pytest.fixture(scope="session")
def smollm_tok(smollm_path):
    return ours(str(smollm_path))


@pytest.fixture(scope="session")
def gemma_tok(gemma_path):
    return ours(str(gemma_path))


@pytest.fixture(scope="session")
def qwen_json_tok(qwen_tokenizer_dir):
    return ours(str(qwen_tokenizer_dir))
