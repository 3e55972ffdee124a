"""ThinkFilter: reasoning/content split of a streamed reply, for any chunking."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenizer.think import ThinkEvent, ThinkFilter


def merged(events: list[ThinkEvent]) -> list[ThinkEvent]:
    out: list[ThinkEvent] = []
    for event in events:
        if out and out[-1].kind == event.kind:
            out[-1] = ThinkEvent(event.kind, out[-1].text + event.text)
        else:
            out.append(event)
    return out


def run(chunks, **kwargs) -> list[ThinkEvent]:
    filt = ThinkFilter(**kwargs)
    events: list[ThinkEvent] = []
    for chunk in chunks:
        events += filt.feed(chunk)
    events += filt.finalize()
    return merged(events)


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(text[start:point])
        start = point
    pieces.append(text[start:])
    return pieces


R, C = "reasoning", "content"


def test_qwen3_style_reply_whole_tags():
    stream = ["<think>", "\n", "2 and 2", " make 4.", "\n", "</think>", "\n\n", "The answer is 4."]
    assert run(stream) == [ThinkEvent(R, "2 and 2 make 4."), ThinkEvent(C, "The answer is 4.")]


def test_tags_split_one_character_at_a_time():
    text = "<think>\nplan\n</think>\n\nanswer"
    assert run(list(text)) == [ThinkEvent(R, "plan"), ThinkEvent(C, "answer")]


def test_partial_close_tag_is_held_back_then_released():
    filt = ThinkFilter()
    assert filt.feed("<think>a</th") == [ThinkEvent(R, "a")]
    assert filt.feed("ink") == []  # still could be </think>
    assert filt.feed("ing is fun") == [ThinkEvent(R, "</thinking is fun")]
    assert filt.feed("</think>ok") == [ThinkEvent(C, "ok")]
    assert filt.finalize() == []


def test_partial_tag_at_end_is_flushed_as_text():
    filt = ThinkFilter()
    assert filt.feed("<think>deep thought</thi") == [ThinkEvent(R, "deep thought")]
    assert filt.finalize() == [ThinkEvent(R, "</thi")]


def test_reply_without_think_block_is_untouched_content():
    assert run(["  Hello", " <think> is a tag"]) == [ThinkEvent(C, "  Hello <think> is a tag")]


def test_a_lone_prefix_of_the_open_tag_is_content_at_the_end():
    assert run(["<th"]) == [ThinkEvent(C, "<th")]
    assert run(["<", "b>bold</b>"]) == [ThinkEvent(C, "<b>bold</b>")]


def test_tags_after_the_block_are_content():
    stream = "<think>x</think>Use <think>...</think> to think."
    assert run([stream]) == [ThinkEvent(R, "x"), ThinkEvent(C, "Use <think>...</think> to think.")]


def test_start_in_reasoning_for_prefilled_templates():
    stream = ["Let me see", ".\n</think>\n\n", "Yes."]
    assert run(stream, start_in_reasoning=True) == [ThinkEvent(R, "Let me see."), ThinkEvent(C, "Yes.")]
    # A redundant open tag at the very start is swallowed.
    assert run(["\n<think>\nhm</think>ok"], start_in_reasoning=True) == [
        ThinkEvent(R, "hm"),
        ThinkEvent(C, "ok"),
    ]


def test_unfinished_reasoning_is_flushed_at_finalize():
    filt = ThinkFilter()
    events = filt.feed("<think>\nstill thinking  \n")
    assert events == [ThinkEvent(R, "still thinking")]
    assert filt.in_reasoning
    assert filt.finalize() == []


def test_in_reasoning_follows_the_stream():
    filt = ThinkFilter()
    assert not filt.in_reasoning
    filt.feed("<think>")
    assert filt.in_reasoning
    filt.feed("a</think>")
    assert not filt.in_reasoning
    assert ThinkFilter(start_in_reasoning=True).in_reasoning


def test_empty_think_block_gives_only_content():
    assert run(["<think>\n\n</think>\n\nHi"]) == [ThinkEvent(C, "Hi")]


def test_whitespace_rules_keep_indentation_of_first_line():
    assert run(["<think>x</think>\n\n    code()\n"]) == [ThinkEvent(R, "x"), ThinkEvent(C, "    code()\n")]
    assert run(["<think>x</think> same line"]) == [ThinkEvent(R, "x"), ThinkEvent(C, "same line")]


def test_strip_whitespace_off_keeps_every_character():
    events = run(["<think>\n a \n</think>\n\nb "], strip_whitespace=False)
    assert events == [ThinkEvent(R, "\n a \n"), ThinkEvent(C, "\n\nb ")]


def test_custom_tags():
    events = run(["<seed:think>", "why", "</seed:", "think>", "because"], open_tag="<seed:think>",
                 close_tag="</seed:think>")
    assert events == [ThinkEvent(R, "why"), ThinkEvent(C, "because")]


def test_for_prompt_reads_the_prompt_tail():
    assert ThinkFilter.for_prompt("<｜Assistant｜><think>\n").start_in_reasoning
    assert not ThinkFilter.for_prompt("<|im_start|>assistant\n<think>\n\n</think>\n\n").start_in_reasoning
    assert not ThinkFilter.for_prompt("<|im_start|>assistant\n").start_in_reasoning


def test_feed_after_finalize_is_an_error():
    filt = ThinkFilter()
    filt.finalize()
    with pytest.raises(ValueError):
        filt.feed("x")


def test_empty_tags_are_rejected():
    with pytest.raises(ValueError):
        ThinkFilter(open_tag="")


def test_real_tokenizer_pieces(qwen_tokenizer_dir):
    """Tags split the way a real BPE vocabulary splits them (Qwen2.5 has no <think> token)."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(qwen_tokenizer_dir / "tokenizer.json"))
    text = "<think>\nThe user greets me; reply in French.\n</think>\n\nBonjour, ça va ?"
    ids = hf.encode(text, add_special_tokens=False).ids
    pieces, previous = [], ""
    for i in range(len(ids)):
        now = hf.decode(ids[: i + 1])
        pieces.append(now[len(previous) :])
        previous = now
    assert "".join(pieces) == text and len(pieces) > 10
    assert run(pieces) == [
        ThinkEvent(R, "The user greets me; reply in French."),
        ThinkEvent(C, "Bonjour, ça va ?"),
    ]


# -- properties ---------------------------------------------------------------

FRAGMENTS = ["<think>", "</think>", "<", "</", "<th", "think", ">", "/", "\n", "\n\n", " ", "\t",
             "a", "bc", "é", "日本", "😀", "<think", "</think", "x</thi", "ink>"]
streams = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=25).map("".join)
options = st.fixed_dictionaries(
    {"start_in_reasoning": st.booleans(), "strip_whitespace": st.booleans()}
)


@settings(max_examples=400, deadline=None)
@given(text=streams, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=30), opts=options)
def test_any_chunking_gives_the_same_events(text, cuts, opts):
    assert run(split_at(text, cuts), **opts) == run([text], **opts)


@settings(max_examples=300, deadline=None)
@given(text=streams, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=30))
def test_without_stripping_only_the_tags_are_removed(text, cuts):
    """strip_whitespace=False loses nothing but the leading whitespace and the two tags."""
    events = run(split_at(text, cuts), strip_whitespace=False)
    joined = "".join(event.text for event in events)
    lead = text.lstrip()
    if lead.startswith("<think>"):
        reasoning, closed, content = lead[len("<think>") :].partition("</think>")
        expected = reasoning + content
        assert [e.kind for e in events] == [k for k, part in ((R, reasoning), (C, content)) if part]
        assert closed or not content
    else:
        expected = text
        assert all(event.kind == C for event in events)
    assert joined == expected


@settings(max_examples=200, deadline=None)
@given(text=streams)
def test_events_are_never_empty_and_reasoning_comes_first(text):
    filt = ThinkFilter()
    events = filt.feed(text) + filt.finalize()
    for event in events:
        assert event.text
    assert [e.kind for e in merged(events)] in ([], [R], [C], [R, C])
