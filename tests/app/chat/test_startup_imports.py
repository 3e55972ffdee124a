"""A plain headless answer loads only what it uses: checked in a fresh interpreter's ``sys.modules``.

The real run: SmolLM2 through llama.cpp on the CPU, history on (a temporary
database).  Each module named here costs start-up time and is only needed
for something this run does not do.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: module -> what would need it
NOT_NEEDED = {
    "openvino": "an Intel GPU/NPU or --backend openvino",
    "mlx": "Apple Silicon, an MLX model or --backend mlx",
    "asyncio": "the MCP client (--tools)",
    "app.tools.mcp_client": "--tools",
    "app.models.hub": "a hub reference (--model ORG/REPO or hf:...)",
    "huggingface_hub": "a hub reference",
    "textual": "the TUI",
}


def test_plain_headless_answer_imports_only_what_it_uses(smollm_path, tmp_path):
    code = (
        "import json, sys\n"
        "from app.cli import main\n"
        f"code = main(['--model', {str(smollm_path)!r}, '--prompt', 'hi', '--max-tokens', '4', '--temperature', '0',"
        " '--ctx', '256'])\n"
        f"print(json.dumps({{'code': code, 'loaded': [m for m in {sorted(NOT_NEEDED)!r} if m in sys.modules],"
        " 'engine': 'llama_cpp' in sys.modules}))\n"
    )
    env = {**os.environ, "TOKCHAT_DATA_DIR": str(tmp_path / "data"), "TOKCHAT_CONFIG_DIR": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # the engine ran in its own process (backends.engine_client): the chat's interpreter never loaded llama_cpp
    assert result["code"] == 0 and not result["engine"]
    assert result["loaded"] == [], {m: NOT_NEEDED[m] for m in result["loaded"]}
    assert (tmp_path / "data" / "history.sqlite3").is_file()  # the history was written: a real run
