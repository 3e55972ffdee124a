"""The environment for a real ``python -m app`` child process whose every folder lies in a test's ``tmp_path``.

One definition for every test that starts tokchat as a user would
(hardening, headless, settings, speculation): no test reads or writes the
developer's own config, history or caches.
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child_env(tmp_path: Path) -> dict[str, str]:
    """An environment for ``python -m app`` whose every folder lies in ``tmp_path``."""
    env = dict(os.environ)
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp_path / "xdg" / name.lower())
    env["TOKCHAT_DATA_DIR"] = str(tmp_path / "data")
    env["TOKCHAT_CONFIG_DIR"] = str(tmp_path / "config")
    env["PYTHONPATH"] = str(ROOT)
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("PYTEST_CURRENT_TEST", None)
    return env
