"""Run one fuzz target under atheris (libFuzzer): ``fuzz.py TARGET [libFuzzer arguments and corpus folders]``.

    .venv/bin/python tests/fuzz/fuzz.py gguf /tmp/new tests/fuzz/corpus/gguf -runs=2000
    .venv/bin/python tests/fuzz/fuzz.py encode tests/fuzz/crashes/encode/crash-1234   # replay one input

libFuzzer writes the inputs that find new coverage into the *first* corpus
folder, so give it a scratch folder first and the committed corpus second.
Coverage is the tokenizer's Python bytecode (atheris instruments
``tokenizer.*`` on import); the C accelerator is not instrumented (atheris's
wheel keeps its libFuzzer's symbols private, so a clang
``-fsanitize-coverage`` build cannot register its counters), so C paths are
reached through the Python code that drives them and checked by the
differential assertions and by ``run_sanitized.py``.  A crash, an unexpected exception or a C/Python divergence
stops the run with libFuzzer's ``crash-<sha1>`` file (``-artifact_prefix``
says where).

``TOKCHAT_ACCEL_DIR=<folder>`` loads ``_accel*.so`` from that folder (a
private copy, ``build_accel.py --out``) instead of the source tree's: a long
campaign then survives an in-place rebuild of the shared extension (an
editable reinstall rewrites the very file the fuzzer has mapped).
"""
from __future__ import annotations

import os
import pkgutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: modules left uninstrumented: generated tables and code no target reaches
_SKIP = {"llama_unicode_data", "trainer", "export_json"}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        raise SystemExit(__doc__)
    target, fuzzer_args = sys.argv[1], sys.argv[2:]
    import atheris

    if "tokenizer" in sys.modules:
        raise SystemExit("tokenizer was imported before atheris could instrument it")
    with atheris.instrument_imports(include=["tokenizer"]):
        import tokenizer

        accel_dir = os.environ.get("TOKCHAT_ACCEL_DIR")
        if accel_dir:
            tokenizer.__path__.insert(0, accel_dir)  # before anything imports tokenizer._accel
        for mod in pkgutil.iter_modules(tokenizer.__path__):
            if mod.name not in _SKIP and not mod.name.startswith("_"):
                __import__(f"tokenizer.{mod.name}")
    import fuzz_targets as targets

    if target not in targets.TARGETS:
        raise SystemExit(f"unknown target {target!r}; targets: {', '.join(targets.TARGETS)}")
    if accel_dir:
        from tokenizer import _accel

        if not _accel.__file__.startswith(accel_dir):
            raise SystemExit(f"TOKCHAT_ACCEL_DIR={accel_dir} holds no _accel*.so ({_accel.__file__} loaded)")
    atheris.Setup([sys.argv[0], *fuzzer_args], targets.TARGETS[target])
    if target in ("encode", "stream"):
        targets.real_tokenizers()  # loaded once, before the clock of the first input starts
    # one input before the clock starts too: the first call builds lazy tables (the encode target's
    # splitters take 0.5 s), which a CPU-starved run at nice 19 would report as a timeout
    targets.TARGETS[target](b"")
    atheris.Fuzz()


if __name__ == "__main__":
    main()
