"""How "thinking on/off" reaches a chat template: the variable each template family reads.

Templates switch reasoning in different ways, and tokchat's one switch
(``--think/--no-think``, ``/think on|off``) is passed the way each defines it:

* ``enable_thinking`` (bool): Qwen3, Qwen3.5, SmolLM3, GLM-4.6, DeepSeek R1 distills
  and DeepSeek V3.1 (which copies it into its own ``thinking``);
* ``thinking`` (bool): IBM Granite 3.x (and DeepSeek V3.1, which reads it first);
* ``reasoning_effort`` (``"low"``/``"medium"``/``"high"``): OpenAI gpt-oss, which always
  reasons: off asks for ``"low"`` (the least it does), on for ``"medium"`` (its own default).

A template is asked only for the variables it mentions, so an unrelated
template renders exactly as before.  ``None`` (auto) passes nothing: the
template's default applies.  Not handled: switches written into the messages
(``/no_think`` in a system prompt is the user's own text).
"""
from __future__ import annotations

import re
from typing import Any

#: a Jinja test or condition on the bare ``thinking`` variable (Granite's ``{%- elif thinking %}``)
_THINKING_VAR = re.compile(r"\{%-?\s*(?:el)?if\s+(?:not\s+)?thinking\b")
#: gpt-oss's effort for thinking off and on
EFFORT = {False: "low", True: "medium"}


def thinking_variables(source: str, enabled: bool | None) -> dict[str, Any]:
    """The template variables that carry ``enabled`` for the template ``source`` ({} for auto)."""
    if enabled is None:
        return {}
    out: dict[str, Any] = {"enable_thinking": enabled}  # HF's convention: always passed, as before
    if _THINKING_VAR.search(source):
        out["thinking"] = enabled
    if "reasoning_effort" in source:
        out["reasoning_effort"] = EFFORT[enabled]
    return out


def has_thinking_switch(source: str) -> bool:
    """Whether the template reads any of the variables above (``/think`` then changes its prompt)."""
    return "enable_thinking" in source or bool(_THINKING_VAR.search(source)) or "reasoning_effort" in source
