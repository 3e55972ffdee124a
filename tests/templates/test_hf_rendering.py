"""Every real template in llama.cpp's ``models/templates`` renders as Hugging Face renders it.

The reference is transformers' own ``apply_chat_template`` (see
``hf_oracle.py``).  Without tools a template must see exactly what HF gives
it (``tools=None``, ``documents=None``): the text must be equal, and where HF
fails (the tool-only ``*-tool_use`` templates, firefunction's undefined
``functions``, Gemma 2's "System role not supported") tokchat fails too,
with one readable line.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from support.hf_oracle import hf_render

from templates import ChatTemplate, TemplateError

CONVERSATIONS = {
    "system-multi-turn": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! Ça va? 🤔"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "  Tell me a joke.\nTwo lines.  "},
    ],
    "one-user-message": [{"role": "user", "content": "What time is it in Tokyo?"}],
}
TOOL_ONLY = {
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_time",
        "description": "Get the current time in a given IANA timezone.",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "description": "e.g. Asia/Tokyo"}},
                       "required": ["timezone"]},
    },
}


def _template_files(templates_dir: Path) -> list[Path]:
    return sorted(templates_dir.glob("*.jinja"))


def test_the_whole_set_is_there(templates_dir: Path) -> None:
    names = {p.name for p in _template_files(templates_dir)}
    assert len(names) >= 70
    assert TOOL_ONLY <= names


@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_every_template_without_tools_renders_as_hf(templates_dir: Path, qwen_tokenizer_dir: Path,
                                                      conversation: str) -> None:
    messages = CONVERSATIONS[conversation]
    mismatched, hf_failed = [], []
    for path in _template_files(templates_dir):
        source = path.read_text(encoding="utf-8")
        expected, hf_error = hf_render(qwen_tokenizer_dir, source, messages)
        template = ChatTemplate(name=path.stem, source=source, bos_token="<s>", eos_token="</s>")
        try:
            ours, our_error = template.render_text(messages), None
        except TemplateError as exc:
            ours, our_error = None, str(exc)
        if hf_error is not None:
            hf_failed.append(path.name)
            if our_error is None:
                mismatched.append(f"{path.name}: HF fails ({hf_error}) but tokchat rendered")
            else:
                assert "\n" not in our_error
        elif ours != expected:
            mismatched.append(f"{path.name}: {our_error or 'different text'}")
    assert not mismatched, "\n".join(mismatched)
    # the three tool-only templates fail in HF itself without tools (it passes tools=None)
    assert TOOL_ONLY <= set(hf_failed)


@pytest.mark.parametrize("name", sorted(TOOL_ONLY))
def test_tool_only_templates_say_what_they_need(templates_dir: Path, name: str) -> None:
    template = ChatTemplate(name="model", source=(templates_dir / name).read_text(encoding="utf-8"),
                            bos_token="<s>", eos_token="</s>")
    with pytest.raises(TemplateError, match="tool-use template that renders only with tools"):
        template.render_text(CONVERSATIONS["one-user-message"])


@pytest.mark.parametrize("name", sorted(TOOL_ONLY))
def test_tool_only_templates_render_with_tools_as_hf(templates_dir: Path, qwen_tokenizer_dir: Path,
                                                      name: str) -> None:
    source = (templates_dir / name).read_text(encoding="utf-8")
    messages = CONVERSATIONS["system-multi-turn"]
    expected, error = hf_render(qwen_tokenizer_dir, source, messages, tools=[TIME_TOOL])
    assert error is None
    ours = ChatTemplate(name="model", source=source, bos_token="<s>", eos_token="</s>").render_text(
        messages, tools=[TIME_TOOL])
    assert ours == expected
    assert "get_current_time" in ours
