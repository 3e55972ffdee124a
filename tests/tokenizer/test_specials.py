"""Special tokens: what plain text may and may not turn into, and literal spans."""
from __future__ import annotations

import pytest
from support.tokenizer_oracles import llama, ours
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tokenizer.core import ATTR_CONTROL
from tokenizer.specials import LlamaSpecialSplitter, SpecialToken

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=["qwen", "smollm", "gemma", "llama32-json", "qwen-json"])
def tok(request, qwen_path, smollm_path, gemma_path, llama32_tokenizer_dir, qwen_tokenizer_dir):
    path = {"qwen": qwen_path, "smollm": smollm_path, "gemma": gemma_path,
            "llama32-json": llama32_tokenizer_dir, "qwen-json": qwen_tokenizer_dir}[request.param]
    return ours(str(path))


def _control_texts(tok) -> list[str]:
    return sorted(t for t, i in tok.special_tokens.items() if tok.token_attr(i) & ATTR_CONTROL)[:50]


@SETTINGS
@given(data=st.data())
def test_plain_encode_never_yields_control_tokens(tok, data):
    pieces = data.draw(st.lists(st.one_of(st.sampled_from(_control_texts(tok)), st.text(max_size=8)), max_size=8))
    ids = tok.encode("".join(pieces))
    assert not [i for i in ids if tok.token_attr(i) & ATTR_CONTROL]


@SETTINGS
@given(data=st.data())
def test_literal_spans_keep_control_text_plain(tok, data):
    """A chat prompt whose user text is a literal span has exactly the template's control tokens."""
    controls = _control_texts(tok)
    user = "".join(data.draw(st.lists(st.one_of(st.sampled_from(controls), st.text(max_size=6)), max_size=6)))
    start, end = controls[0], controls[-1]
    prompt = f"{start}user\n{user}{end}\n"
    span = (len(start) + 5, len(start) + 5 + len(user))
    ids = tok.encode(prompt, special=True, literal_spans=[span])
    assert [i for i in ids if tok.token_attr(i) & ATTR_CONTROL] == [tok.token_to_id(start), tok.token_to_id(end)]
    assert tok.decode(ids) == tok.decode(tok.encode(prompt, special=True))  # same text, only the carving differs


def _overlapping_special(tok, text: str, lo: int, hi: int) -> bool:
    for t in tok.special_tokens:
        at = text.find(t)
        while at >= 0:
            if at < hi and at + len(t) > lo:
                return True
            at = text.find(t, at + 1)
    return False


@SETTINGS
@given(text=st.text(max_size=40))
def test_spans_without_specials_change_nothing(tok, text):
    prompt = f"<|im_start|>user\n{text}<|im_end|>"
    span = (17, 17 + len(text))
    assume(not _overlapping_special(tok, prompt, *span))
    assert tok.encode(prompt, special=True, literal_spans=[span]) == tok.encode(prompt, special=True)


def test_user_defined_tokens_match_even_without_special(qwen_path):
    """Qwen2.5's <tool_call> is user-defined: llama.cpp carves it with special=False."""
    tok = ours(str(qwen_path))
    tid = tok.token_to_id("<tool_call>")
    assert tid is not None and not tok.is_special(tid)
    text = "call <tool_call>{}</tool_call> now"
    want = llama(str(qwen_path)).tokenize(text.encode(), add_bos=False, special=False)
    assert tok.encode(text) == want and tid in want


def test_longest_first_not_leftmost():
    """llama.cpp carves longer tokens first everywhere, so "bcd" beats an earlier "ab"."""
    splitter = LlamaSpecialSplitter([SpecialToken("ab", 1, True), SpecialToken("bcd", 2, True)])
    assert splitter.split("abcd", special=True) == ["a", 2]
    assert splitter.split("abcd", special=False) == ["abcd"]
    assert splitter.split("xabx", special=True, literal_spans=[(1, 2)]) == ["xabx"]


def test_strip_flags_eat_ascii_whitespace():
    splitter = LlamaSpecialSplitter([SpecialToken("<r>", 7, True, rstrip=True), SpecialToken("<l>", 8, True, lstrip=True)])
    assert splitter.split("a <r> \n b  <l>c", special=True) == ["a ", 7, "b", 8, "c"]


def test_special_token_table(qwen_tok):
    assert qwen_tok.special_tokens["<|im_end|>"] == qwen_tok.token_to_id("<|im_end|>")
    assert qwen_tok.token_to_id("<|im_end|>") in qwen_tok.eog_ids
    assert qwen_tok.is_special(qwen_tok.token_to_id("<|im_end|>"))
