"""An MLX model directory for real: SmolLM2 saved by mlx-lm from the GGUF, chatting with the GGUF's ids.

The directory comes from the ``smollm_mlx_dir`` fixture (mlx-lm's own save
of the model built from the GGUF asset, plus the GGUF's tokenizer written as
tokenizer.json).  Oracles: llama.cpp's tokenizer on the GGUF and HF
``tokenizers`` on the written tokenizer.json; the MLX backend on the GGUF for
the generated ids.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from backends.base import LoadOptions, SamplingParams
from backends.mlx import MLXBackend

ROOT = Path(__file__).resolve().parents[2]
TEXTS = (
    "Hello, world! How are you today?",
    "Numbers: 3.14159, 2026-11-24, 1234567890 and 42nd.",
    "  leading spaces, trailing  \n\n\tand tabs\r\n",
    "def add(a, b):\n    return a + b  # it's Python\n",
    "Grüße aus Köln — naïve café, ½ € and 日本語のテキスト 🎉",
    "I'm sure they'll say we've done what you'd've done.",
)
CHAT = "<|im_start|>user\nList three fruits, one per line.<|im_end|>\n<|im_start|>assistant\n"


def test_tokenizer_json_reads_the_same_in_tokchat_hf_and_llama_cpp(smollm_mlx_dir, vocab):
    import tokenizers

    from tokenizer import load_tokenizer

    ours = load_tokenizer(smollm_mlx_dir)
    hf = tokenizers.Tokenizer.from_file(str(smollm_mlx_dir / "tokenizer.json"))
    for text in TEXTS:
        expected = vocab.ids(text)  # llama.cpp on the GGUF
        assert ours.encode(text) == expected, text
        assert hf.encode(text, add_special_tokens=False).ids == expected, text
        assert hf.decode(expected, skip_special_tokens=False) == ours.decode(expected) == text
    assert ours.encode(CHAT, special=True) == hf.encode(CHAT, add_special_tokens=False).ids == vocab.chat(
        "List three fruits, one per line.")
    assert ours.special_tokens["<|im_end|>"] in ours.eog_ids
    assert ours.chat_template  # the GGUF's template travels with the directory


def test_mlx_dir_generates_the_gguf_ids(smollm_mlx_dir, smollm_path, vocab, tmp_path):
    config = json.loads((smollm_mlx_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["quantization"]["bits"] == 4
    prompt = vocab.chat("Name three colors of the rainbow.")
    greedy = SamplingParams(temperature=0, max_tokens=12)
    replies = []
    for model in (smollm_path, smollm_mlx_dir):
        backend = MLXBackend()
        backend.load(model, LoadOptions(log_path=tmp_path / "engine.log"))
        try:
            replies.append(list(backend.generate(prompt, greedy, {vocab.eos})))
        finally:
            backend.close()
    assert replies[0] and replies[1] == replies[0]


def test_chat_with_model_dir_answers_as_the_gguf_does(smollm_mlx_dir, smollm_path, tmp_path):
    """The whole chat through ``--model DIR`` (auto picks MLX for a directory)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        env[name] = str(tmp_path / name.lower())
    outputs = []
    for model, backend in ((smollm_mlx_dir, []), (smollm_path, ["--backend", "mlx"])):
        result = subprocess.run(
            [sys.executable, "-m", "app", "--model", str(model), *backend, "--prompt", "List three fruits, one per line.",
             "--temperature", "0", "--max-tokens", "12", "--stats", "--no-history"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        stats = json.loads(result.stderr.strip().splitlines()[-1])
        outputs.append((result.stdout, stats["prompt_tokens"], stats["completion_tokens"], stats["backend"]))
    assert outputs[0] == outputs[1]
    assert outputs[0][0].strip() and outputs[0][3] == "mlx"
