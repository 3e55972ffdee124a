"""The MLX GGUF loader's qwen2 path, for real: Qwen2.5-Coder requantized to Q8_0 by llama.cpp.

The only Qwen asset is Q4_K_M, which ``mx.load`` cannot read, so llama.cpp's
own quantizer writes a Q8_0 copy at test time.  That copy exercises what
the llama path does not: attention biases, NeoX RoPE, an untied output head
and 8-bit layers.  llama.cpp on the same file is the oracle.
"""
from __future__ import annotations

import ctypes

from backends.base import LoadOptions, SamplingParams
from backends.llama_cpp import LlamaCppBackend
from backends.mlx import MLXBackend

IM_END = "<|im_end|>"


def requantize_q8_0(src, dst) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) == 0


def test_mlx_qwen2_gguf_matches_llama_cpp(qwen_path, tmp_path):
    import llama_cpp

    q8 = tmp_path / "qwen-q8_0.gguf"
    requantize_q8_0(qwen_path, q8)
    vocab = llama_cpp.Llama(str(q8), vocab_only=True, verbose=False)
    try:
        prompt = vocab.tokenize(b"<|im_start|>user\nWrite a Python function that adds two numbers.<|im_end|>\n"
                                b"<|im_start|>assistant\n", add_bos=False, special=True)
        stop = {vocab.tokenize(IM_END.encode(), add_bos=False, special=True)[0]}
    finally:
        vocab.close()
    greedy = SamplingParams(temperature=0, max_tokens=6, repeat_penalty=1.0)
    options = LoadOptions(log_path=tmp_path / "engine.log")
    oracle = LlamaCppBackend()
    oracle.load(q8, options)
    try:
        expected = list(oracle.generate(prompt, greedy, stop))
    finally:
        oracle.close()
    mlx = MLXBackend()
    mlx.load(q8, options)
    try:
        assert mlx.info.quantization == "Q8_0"
        assert list(mlx.generate(prompt, greedy, stop)) == expected
    finally:
        mlx.close()
