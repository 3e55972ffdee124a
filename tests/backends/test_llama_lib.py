"""llama-cpp-python's bindings without its high-level package (backends.llama_lib), in a fresh interpreter.

Real replies through the engine (greedy and sampled, the default repetition
penalty on) import the ctypes bindings only: not ``llama_cpp.llama`` (the
``Llama`` class), its chat formats, Jinja2 or NumPy, which were most of the
engine process's import time and memory.  The package stays whole to code
that asks for more of it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
from pathlib import Path
from backends.engine_process import _make_backend
from backends.base import LoadOptions, SamplingParams
backend = _make_backend("llama.cpp", "CPU")
backend.load(Path(sys.argv[1]), LoadOptions(n_ctx=256, log_path=Path(sys.argv[2])))
ids = []
backend.generate([1, 2, 3], SamplingParams(temperature=0, max_tokens=3), set()).drive(ids.append)
backend.generate([1, 2, 3], SamplingParams(temperature=0.8, seed=1, max_tokens=3), set()).drive(ids.append)
loaded = [m for m in ("llama_cpp.llama", "llama_cpp.llama_chat_format", "jinja2", "diskcache", "numpy")
          if m in sys.modules]
import llama_cpp
from llama_cpp import Llama  # the real __init__ runs now, once
print(json.dumps({"ids": len(ids), "loaded": loaded, "bindings": "llama_cpp.llama_cpp" in sys.modules,
                  "llama": Llama.__module__, "version": llama_cpp.__version__,
                  "same": llama_cpp.llama_backend_init is sys.modules["llama_cpp.llama_cpp"].llama_backend_init}))
"""


def test_the_engine_imports_the_bindings_alone(smollm_path, tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(smollm_path), str(tmp_path / "engine.log")],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ids"] == 6 and result["bindings"]
    assert result["loaded"] == []
    assert result["llama"] == "llama_cpp.llama" and result["version"] and result["same"]
