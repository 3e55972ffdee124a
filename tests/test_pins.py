"""Each pinned version is written once (backends/pins.py); pyproject.toml, which cannot import it, agrees."""
from __future__ import annotations

import re
from pathlib import Path

from backends.pins import BUNDLED_MODEL, ENGINE_REQUIREMENT

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_requires_the_pinned_engine():
    requirements = re.findall(r'"(llama-cpp-python[^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert requirements == [ENGINE_REQUIREMENT]


def test_no_other_file_writes_a_pin_again():
    """The version strings appear in backends/pins.py and pyproject.toml only."""
    versions = {ENGINE_REQUIREMENT.split("==")[1], BUNDLED_MODEL.split("==")[1]}
    allowed = {ROOT / "backends" / "pins.py", ROOT / "pyproject.toml"}
    again = []
    for path in [ROOT / "dev.py", *ROOT.glob("app/**/*.py"), *ROOT.glob("backends/*.py"), ROOT / "tests" / "support" / "assets.py"]:
        if path in allowed:
            continue
        text = path.read_text()
        again += [f"{path.relative_to(ROOT)}: {v}" for v in versions if f"=={v}" in text or f'"{v}"' in text]
    assert not again, again
