"""The optional C accelerator of tokchat's tokenizer; everything else is in pyproject.toml.

The extension is declared here rather than in pyproject's
``[tool.setuptools] ext-modules``, which setuptools still marks experimental
and warns about on every install.  ``optional=True``: without a C compiler
the build goes on and the pure-Python twin gives the same ids.

``TOKCHAT_SANITIZE=1`` builds it under AddressSanitizer and
UndefinedBehaviorSanitizer (``tests/fuzz/run_sanitized.py`` builds such a copy
in a separate folder and runs the tokenizer and hardening tests against it).
``TOKCHAT_COVERAGE=1`` builds it with gcc's ``--coverage`` at ``-O0``
(``bench/fuzz_coverage.py`` measures which lines of the C the fuzz corpus reaches).
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
_COVERAGE = os.environ.get("TOKCHAT_COVERAGE", "")
if _COVERAGE not in ("", "0", "1"):
    raise SystemExit(f"TOKCHAT_COVERAGE={_COVERAGE!r}: use 1 (gcov counters) or leave it unset")
if _COVERAGE == "1":
    # -O0 so that every source line keeps its own counter; the last -O wins over Python's own CFLAGS
    _COMPILE, _LINK = [*_COMPILE, "--coverage", "-O0", "-g"], [*_LINK, "--coverage"]


def accel_extension() -> Extension:
    """The C accelerator, compiled with the sanitizer flags ``TOKCHAT_SANITIZE`` asks for."""
    return Extension(
        "tokenizer._accel",
        sources=["tokenizer/_accel.c", "tokenizer/_accel_spm.c", "tokenizer/_accel_gguf.c",
                 "tokenizer/_accel_merge_free.c", "tokenizer/_accel_encode.c"],
        depends=["tokenizer/_accel_merger.h", "tokenizer/_accel_split.h"],
        extra_compile_args=_COMPILE,
        extra_link_args=_LINK,
        optional=not _COMPILE,
    )


def pick_extension() -> Extension:
    """The engine's greedy pick (backends/_pick.c): llama.cpp's logits without NumPy in the engine process."""
    return Extension("backends._pick", sources=["backends/_pick.c"], extra_compile_args=_COMPILE,
                     extra_link_args=_LINK, optional=not _COMPILE)


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__ too
    setup(ext_modules=[accel_extension(), pick_extension()])
