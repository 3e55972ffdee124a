"""The optional C accelerator of tokchat's tokenizer; everything else is in pyproject.toml.

The extension is declared here rather than in pyproject's
``[tool.setuptools] ext-modules``, which setuptools still marks experimental
and warns about on every install.  ``optional=True``: without a C compiler
the build goes on and the pure-Python twin gives the same ids.

``TOKCHAT_SANITIZE=1`` builds it under AddressSanitizer and
UndefinedBehaviorSanitizer (``tests/fuzz/run_sanitized.py`` builds such a copy
in a separate folder and runs the tokenizer and hardening tests against it).
``tests/fuzz/build_accel.py`` builds it (sanitized or not, in place or into
a folder of its own) without going through pyproject.toml, whose metadata
needs a newer setuptools than some venvs hold.  A sanitized build is never
optional: a silent fallback to pure Python would test nothing.
"""
import os

from setuptools import Extension, setup

_SANITIZE = os.environ.get("TOKCHAT_SANITIZE", "")
_FLAGS = {
    "": [],
    "0": [],
    "1": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer",
          "-g", "-O1"],
}
if _SANITIZE not in _FLAGS:
    raise SystemExit(f"TOKCHAT_SANITIZE={_SANITIZE!r}: use 1 (ASan + UBSan) or leave it unset")
_COMPILE = _FLAGS[_SANITIZE]
# ASan and UBSan runtimes are linked into the extension; the interpreter preloads libasan
_LINK = [f for f in _COMPILE if f.startswith("-fsanitize=address")]


def accel_extension() -> Extension:
    """The C accelerator, compiled with the sanitizer flags ``TOKCHAT_SANITIZE`` asks for."""
    return Extension(
        "tokenizer._accel",
        sources=["tokenizer/_accel.c", "tokenizer/_accel_spm.c", "tokenizer/_accel_gguf.c",
                 "tokenizer/_accel_merge_free.c"],
        depends=["tokenizer/_accel_merger.h"],
        extra_compile_args=_COMPILE,
        extra_link_args=_LINK,
        optional=not _COMPILE,
    )


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__ too
    setup(ext_modules=[accel_extension()])
