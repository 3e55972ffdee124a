"""The optional C accelerator of tokchat's tokenizer; everything else is in pyproject.toml.

The extension is declared here rather than in pyproject's
``[tool.setuptools] ext-modules``, which setuptools still marks experimental
and warns about on every install.  ``optional=True``: without a C compiler
the build goes on and the pure-Python twin gives the same ids.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tokenizer._accel",
            sources=["tokenizer/_accel.c", "tokenizer/_accel_spm.c", "tokenizer/_accel_gguf.c",
                     "tokenizer/_accel_merge_free.c"],
            depends=["tokenizer/_accel_merger.h"],
            optional=True,
        ),
    ],
)
