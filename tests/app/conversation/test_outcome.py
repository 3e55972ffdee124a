"""A turn says how it ended (answered, refused with its reason, stopped, failed), and a session is
built one way by every front end: ``ChatSession.from_options`` and ``with_template`` (``/template``)
carry every setting.

The real SmolLM2 tokenizer and template; replies from the ScriptedBackend, so every id is known.
"""
from __future__ import annotations

import inspect
import threading
from dataclasses import replace
from functools import lru_cache

from app.conversation.session import ChatSession, TurnOutcome
from app.settings.options import ChatOptions
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from templates import resolve_template

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


@lru_cache(maxsize=None)
def _tokenizer(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


def session_for(smollm_path, texts, *, context_size=2048, **backend_kwargs):
    tok = _tokenizer(smollm_path)
    template, _ = resolve_template("auto", tok)
    queue = [tok.encode(text) + [tok.special_tokens["<|im_end|>"]] for text in texts]
    backend = ScriptedBackend(lambda prompt: queue.pop(0), context_size=context_size, **backend_kwargs)
    return ChatSession(tok, template, backend=backend, system_prompt="Be brief.", sampling=GREEDY,
                       context_size=context_size)


def drain(events):
    """Every event, and the outcome the turn's generator returned."""
    seen = []
    while True:
        try:
            seen.append(next(events))
        except StopIteration as end:
            return seen, end.value


def test_an_answered_turn_returns_its_outcome_and_the_session_keeps_it(smollm_path):
    session = session_for(smollm_path, ["Hello there."])
    events, outcome = drain(session.send("hi"))
    assert outcome == TurnOutcome("answered") == session.last_outcome and not outcome.refused
    assert events[-1].kind == "done" and events[-1].data is outcome
    assert session.messages[-1].content == "Hello there."


def test_a_refused_turn_says_why_and_changes_nothing(smollm_path):
    session = session_for(smollm_path, ["fine", "again"], context_size=128)
    drain(session.send("short"))
    before = list(session.messages)
    events, outcome = drain(session.send("word " * 500))
    assert outcome.refused and outcome.kind == "refused" and session.last_outcome is outcome
    assert outcome.reason == events[0].text and outcome.reason.startswith("message too long")
    assert [e.kind for e in events] == ["error", "done"] and events[-1].data is outcome
    assert session.messages == before
    # an edit refused the same way: the old message and reply stay, and no empty sibling is left
    events, outcome = drain(session.edit_last_user("word " * 500))
    assert outcome.refused and session.messages == before and session.branches.forks == {}


def test_every_kind_of_refusal_is_an_outcome(smollm_path):
    session = session_for(smollm_path, [])
    for events, why in ((session.regenerate(), "nothing to regenerate"), (session.continue_reply(), "nothing to "
                        "continue"), (session.reply_with(""), "/reply needs"), (session.reply_with("So"), "nothing "
                        "to reply to")):
        _, outcome = drain(events)
        assert outcome.refused and outcome.reason.startswith(why), outcome
    assert session.messages == []


def test_a_cancelled_turn_is_stopped_and_a_failed_one_says_its_error(smollm_path):
    session = session_for(smollm_path, ["word " * 300], delay_s=0.01)
    events = session.send("Go")
    next(events)
    threading.Thread(target=session.cancel).start()
    _, outcome = drain(events)
    assert outcome == TurnOutcome("stopped") and session.messages[-1].finish_reason == "cancelled"
    # a reader that stops reading stops the turn too: the session still knows how it ended
    session = session_for(smollm_path, ["Hello world, how are you"])
    events = session.send("hi")
    next(events)
    events.close()
    assert session.last_outcome == TurnOutcome("stopped")
    session = session_for(smollm_path, ["Partial answer here and more"], fail_after=3)
    _, outcome = drain(session.send("hi"))
    assert outcome.kind == "failed" and "scripted fault" in outcome.reason and not outcome.refused


def test_a_regenerate_is_answered_and_keeps_the_old_reply_as_a_sibling(smollm_path):
    session = session_for(smollm_path, ["One.", "Two."])
    drain(session.send("hi"))
    _, outcome = drain(session.regenerate())
    assert outcome == TurnOutcome("answered") and session.messages[-1].content == "Two."
    assert len(session.branches.forks[1].alternatives) == 2


def test_from_options_takes_every_session_setting_of_the_options(smollm_path):
    tok = _tokenizer(smollm_path)
    template, _ = resolve_template("chatml", tok)
    options = ChatOptions(system="Be kind.", sampling=replace(GREEDY, temperature=0.4), think=True,
                          reasoning_budget=12)
    session = ChatSession.from_options(options, tok, template, backend=ScriptedBackend([1]), context_size=512)
    assert (session.system_prompt, session.sampling, session.enable_thinking, session.reasoning_budget,
            session.context_size) == ("Be kind.", options.sampling, True, 12, 512)
    assert session.sampling is not options.sampling  # the session's own to change (/temp)


def test_with_template_carries_every_setting_and_the_conversation(smollm_path):
    session = session_for(smollm_path, ["One.", "Two."])
    drain(session.send("hi"))
    drain(session.regenerate())
    session.reasoning_budget, session.enable_thinking = 5, False
    session.tools, session.tool_instructions = [{"type": "function", "function": {"name": "f"}}], "Use f."
    session.sampling = replace(session.sampling, temperature=0.3)
    session.set_system("Be terse.")
    chatml, _ = resolve_template("chatml", session.tokenizer)
    new = session.with_template(chatml)
    # every keyword of the constructor beyond the parts is a setting, and each one is carried over
    keywords = set(inspect.signature(ChatSession.__init__).parameters) - {"self", "tokenizer", "template",
                                                                           "backend", "context_size"}
    assert set(session.settings()) == keywords
    assert new.settings() == session.settings() and new.template is chatml
    assert (new.backend, new.context_size) == (session.backend, session.context_size)
    assert [m.content for m in new.messages] == ["hi", "Two."] and new.branches is session.branches
