"""A tool turn's stats add up (issue 44, C11): ``--stats`` showed ``new_prompt_tokens 460 > prompt_tokens 266``
and 16,336 prompt ids/s, the last step's speed beside the whole turn's count.

The turn's prompt is its last step's; "new" is, as for a one-step turn, the part of it that was not in
the cache when the turn began, so never more than the total; the speed is every step's evaluated ids
over every step's evaluation time.
"""
from __future__ import annotations

import io
import json

from support.tool_helpers import Script, call_text, sdk_server_config

from app.chat.headless import run_headless
from app.conversation.messages import TurnStats
from app.settings.options import ChatOptions
from app.settings.tools import ToolSettings
from app.tools.loop import turn_prompt_speed
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from tokenizer import load_tokenizer


class CachelessBackend(ScriptedBackend):
    """The scripted replies from a backend that keeps no prompt cache between requests (a server whose
    slot another client took, a restarted engine): every step evaluates its whole prompt."""

    def generate(self, *args, **kwargs):
        self._cached = []
        return super().generate(*args, **kwargs)


def test_new_prompt_ids_never_exceed_the_prompt_when_a_step_reevaluates(qwen_path):
    tok = load_tokenizer(qwen_path)
    script = Script(tok, [call_text("add", {"a": 40, "b": 2}), "It is 42."])
    tools = ToolSettings(enabled="test", servers={"test": sdk_server_config()}, approve_all=True)
    options = ChatOptions(model=str(qwen_path), prompt="What is 40 + 2?", sampling=SamplingParams(temperature=0),
                          stats=True, history=False, tools=tools)
    out, err = io.StringIO(), io.StringIO()
    assert run_headless(options, backend=CachelessBackend(script), out=out, err=err) == 0, err.getvalue()
    stats = json.loads(err.getvalue().splitlines()[-1])
    assert stats["model_steps"] == 2 and stats["prompt_tokens"] == len(script.prompts[1])
    # both steps evaluated their whole prompt: of the turn's prompt, none came from a cache
    assert stats["new_prompt_tokens"] == stats["prompt_tokens"], stats


def test_the_turn_prompt_speed_is_all_evaluated_ids_over_all_evaluation_time():
    first = TurnStats(new_prompt_tokens=400, prompt_tokens=400, prompt_tokens_per_s=100.0)  # 4 s
    second = TurnStats(new_prompt_tokens=60, prompt_tokens=266, prompt_tokens_per_s=16336.0)  # a cached step
    assert turn_prompt_speed([first, second]) == 460 / (4.0 + 60 / 16336.0)
    assert turn_prompt_speed([TurnStats(new_prompt_tokens=0, prompt_tokens_per_s=0.0)]) == 0.0
