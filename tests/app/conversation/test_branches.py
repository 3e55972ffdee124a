"""Branches in the session: regenerate and edit keep siblings; the chat continues from the one shown
with prompt ids that extend that branch's own ids exactly (so the backend's cache is reused).

Real SmolLM2 tokenizer and template; the scripted backend answers each
turn with the next reply in a list and keeps the ids it was sent.
"""
from __future__ import annotations

from functools import lru_cache

from app.conversation.branches import BranchTree
from app.conversation.session import ChatMessage, ChatSession
from backends import SamplingParams
from backends.base import common_prefix_length
from backends.scripted import ScriptedBackend
from templates import prompt_ids, resolve_template


@lru_cache(maxsize=None)
def _tok(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


class Recording(ScriptedBackend):
    def __init__(self, replies):
        self.queue = list(replies)
        super().__init__(lambda prompt: self.queue.pop(0))
        self.prompts = []

    def generate(self, prompt_ids, sampling, stop_ids, on_progress=None):
        self.prompts.append(list(prompt_ids))
        return super().generate(prompt_ids, sampling, stop_ids, on_progress)


def make(tok, texts):
    end = tok.special_tokens["<|im_end|>"]
    template, _ = resolve_template("auto", tok)
    backend = Recording([tok.encode(t) + [end] for t in texts])
    return ChatSession(tok, template, backend=backend, system_prompt="Be brief.",
                       sampling=SamplingParams(temperature=0, max_tokens=32), context_size=2048)


def contents(session):
    return [m.content for m in session.messages]


def test_regenerate_twice_move_between_siblings_and_continue_from_the_first(smollm_path):
    tok = _tok(smollm_path)
    session = make(tok, ["Paris.", "It is Paris.", "Paris, France.", "About 2 million.", "Lyon."])
    list(session.send("Capital of France?"))
    list(session.regenerate())
    list(session.regenerate())
    assert contents(session) == ["Capital of France?", "Paris, France."]
    assert session.branches.position(1) == (3, 3)
    fork_prompt = session.messages[1].record.prompt.ids
    third_cached = list(fork_prompt) + list(session.messages[1].record.reply_ids)

    session.switch_branch(1, 0)
    assert contents(session) == ["Capital of France?", "Paris."] and session.branches.position(1) == (1, 3)
    first = session.messages[1].record
    # the conversation rendered: the reply as generated plus its closing markup (one definition, see context_used)
    rendered = session.template.render([{"role": "system", "content": session.system_prompt}]
                                       + [{"role": m.role, "content": m.content} for m in session.messages],
                                       add_generation_prompt=False)
    assert session.context_used == len(prompt_ids(session.tokenizer, rendered))
    assert session.context_used > len(first.prompt.ids) + len(first.reply_ids)
    list(session.send("How many people live there?"))
    sent = session.backend.prompts[-1]
    # the prompt extends the first branch's own ids exactly (its reply as generated) ...
    assert sent[:len(first.prompt.ids) + len(first.reply_ids)] == list(first.prompt.ids) + list(first.reply_ids)
    # ... so the backend, holding the third branch, re-evaluates only what the branches do not share
    shared = common_prefix_length(third_cached, sent)
    assert shared >= len(fork_prompt) and session.generation_stats.prompt_evaluated == len(sent) - shared
    assert contents(session)[-1] == "About 2 million."

    # the third branch is still there, without the later turn; the first keeps its continuation
    session.switch_branch(1, 2)
    assert contents(session) == ["Capital of France?", "Paris, France."]
    session.switch_branch(1, 0)
    assert contents(session) == ["Capital of France?", "Paris.", "How many people live there?", "About 2 million."]
    list(session.send("And the second city?"))
    assert contents(session)[-1] == "Lyon."


def test_edit_keeps_the_old_prompt_and_reply_as_a_sibling(smollm_path):
    tok = _tok(smollm_path)
    session = make(tok, ["Hi.", "Four.", "Hello!"])
    list(session.send("Hello"))
    list(session.send("2+2?"))
    list(session.edit_last_user("Say hello"))
    assert contents(session)[2:] == ["Say hello", "Hello!"] and session.branches.position(2) == (2, 2)
    session.switch_branch(2, 0)
    assert contents(session)[2:] == ["2+2?", "Four."]
    assert [m.content for m in session.branches.all_messages()] == ["Say hello", "Hello!"]


def test_a_refused_regenerate_leaves_no_empty_sibling(smollm_path):
    tok = _tok(smollm_path)
    session = make(tok, ["Yes."])
    list(session.send("Ok?"))
    session.context_size = 8  # nothing fits now: the regenerate is refused
    events = list(session.regenerate())
    assert events[0].kind == "error"
    assert contents(session) == ["Ok?", "Yes."] and session.branches.forks == {}


def test_branch_tree_keeps_deeper_forks_with_their_branch():
    tree = BranchTree()
    u1, a1, a1b, u2, a2, a2b = (ChatMessage(r, t) for r, t in [("user", "u1"), ("assistant", "a1"),
                                                              ("assistant", "a1b"), ("user", "u2"),
                                                              ("assistant", "a2"), ("assistant", "a2b")])
    path = [u1, a1, u2, a2]
    tree.fork(path, 3)
    path = path[:3] + [a2b]
    tree.fork(path, 1)
    path = [u1, a1b]
    assert tree.position(1) == (2, 2) and tree.position(3) is None
    path = tree.switch(path, 1, 0)
    assert path == [u1, a1, u2, a2b] and tree.position(3) == (2, 2)
    path = tree.switch(path, 3, 0)
    assert path == [u1, a1, u2, a2]
    path = tree.switch(path, 1, 1)
    assert path == [u1, a1b] and tree.position(3) is None
    assert {m.content for m in tree.all_messages()} == {"a1", "u2", "a2", "a2b"}
