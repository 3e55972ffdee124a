"""The code parses with the oldest Python that pyproject declares (``requires-python``).

A syntax newer than the declared minimum fails every chat on that Python
before a line runs; this reads the minimum from pyproject.toml and parses
every module of the four packages with that version's grammar (``ast``'s
``feature_version``).  Calls that only newer Pythons have (Popen's
``process_group`` was one) are checked where they run:
tests/backends/test_engine_client_python310.py starts the engine on a real 3.10.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "backends", "tokenizer", "templates")


def declared_minimum() -> tuple[int, int]:
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)"', text, re.M)
    assert found, "pyproject.toml declares no requires-python >= X.Y"
    return int(found.group(1)), int(found.group(2))


def test_every_module_parses_with_the_declared_minimum_python():
    minimum = declared_minimum()
    assert minimum <= sys.version_info[:2]
    failures = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            try:
                ast.parse(path.read_text(), str(path), feature_version=minimum)
            except SyntaxError as exc:
                failures.append(f"{path.relative_to(ROOT)}:{exc.lineno}: {exc.msg}")
    assert not failures, f"syntax newer than Python {minimum[0]}.{minimum[1]}:\n" + "\n".join(failures)


def test_modules_that_only_newer_pythons_have_are_imported_behind_a_version_check():
    """``tomllib`` is 3.11's: importing it is allowed only in a ``sys.version_info`` branch (tomli before)."""
    minimum = declared_minimum()
    newer = {"tomllib": (3, 11)}
    bare = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            guarded = {id(n) for node in ast.walk(tree) if isinstance(node, (ast.If, ast.Try))
                       for n in ast.walk(node)}
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                for name in names:
                    if newer.get(name, (0, 0)) > minimum and id(node) not in guarded:
                        bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: import {name}")
    assert not bare, "\n".join(bare)
