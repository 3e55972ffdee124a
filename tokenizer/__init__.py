"""tokchat's own tokenizer: GGUF and tokenizer.json vocabularies, llama.cpp / HF exact.

    from tokenizer import load_tokenizer
    tok = load_tokenizer("model.gguf")
    ids = tok.encode("Hello<|im_end|>", special=True)
    text = tok.decode(ids)

See :class:`tokenizer.core.Tokenizer` for the full interface.
"""
from tokenizer.core import Tokenizer
from tokenizer.errors import GGUFError, TokenizerError
from tokenizer.loader import load_tokenizer

__all__ = ["load_tokenizer", "Tokenizer", "TokenizerError", "GGUFError"]
