"""llama-cpp-python's C bindings without the rest of the package.

tokchat calls llama.cpp's C API (``llama_cpp.llama_cpp``, ctypes) and
nothing else of llama-cpp-python, but ``import llama_cpp`` runs the package's
``__init__``, which also imports its high-level ``Llama`` class: its chat
formats and Jinja2, its grammar, tokenizer and cache modules.  That
was 105 of the 128 ms the import took, on the critical path of every engine
start (measured: docs/engine.md, "Figures behind the code's choices").

:func:`llama_bindings` imports the bindings module alone and puts the
package in ``sys.modules`` with its ``__init__`` not yet run.  The package
stays whole to anyone who asks more of it: an attribute the bindings have is
served from them (what the ``__init__``'s ``from .llama_cpp import *``
would have put there), and any other (``Llama``, ``__version__``) runs the
real ``__init__`` first, once.  Where the package was already imported
whole, it is returned as it is.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_PACKAGE = "llama_cpp"
_BINDINGS = "llama_cpp.llama_cpp"
_lock = threading.Lock()


def llama_bindings() -> Any:
    """The ``llama_cpp`` package, its C bindings imported (see the module docstring); ImportError without it."""
    with _lock:
        package = sys.modules.get(_PACKAGE)
        if package is None:
            spec = importlib.util.find_spec(_PACKAGE)
            if spec is None or spec.loader is None:
                raise ImportError(f"No module named {_PACKAGE!r}", name=_PACKAGE)
            package = importlib.util.module_from_spec(spec)
            package.__getattr__ = _whole_on_demand(package, spec)  # type: ignore[method-assign]
            sys.modules[_PACKAGE] = package
            try:
                importlib.import_module(_BINDINGS)
            except BaseException:
                del sys.modules[_PACKAGE]  # a later import tries afresh and says what is wrong itself
                raise
        elif _BINDINGS not in sys.modules:
            importlib.import_module(_BINDINGS)
    return package


def _whole_on_demand(package: ModuleType, spec: Any) -> Any:
    """The stub's module ``__getattr__`` (PEP 562): the bindings' names first, else the real ``__init__``."""
    state = {"whole": False}

    def __getattr__(name: str) -> Any:
        bindings = sys.modules.get(_BINDINGS)
        if bindings is not None and not name.startswith("_") and hasattr(bindings, name):
            return getattr(bindings, name)
        if not state["whole"]:
            state["whole"] = True  # before exec: the __init__'s own lookups must not run it again
            spec.loader.exec_module(package)
            if name in package.__dict__:
                return package.__dict__[name]
        raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")

    return __getattr__
