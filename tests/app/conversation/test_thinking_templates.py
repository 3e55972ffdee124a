"""Thinking on/off reaches each real template the way it defines it, rendered as the reference renders it.

The templates are llama.cpp's own ``models/templates`` files (the
``llama.cpp-models`` test asset); the reference is llama-cpp-python's
``Jinja2ChatFormatter`` (Hugging Face's Jinja environment) given the
variables a caller of that template passes: ``enable_thinking`` for Qwen3 and
SmolLM3, ``thinking`` for Granite, ``reasoning_effort`` for gpt-oss.  Each
template must also change with the switch, or the switch would be a no-op.
"""
from __future__ import annotations

import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from templates import ChatTemplate
from templates.thinking import has_thinking_switch, thinking_variables

BOS, EOS = "<|bos|>", "<|eos|>"
#: no system message: Granite writes its thinking instructions only where the user gave none
MESSAGES = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
]

#: template file -> the variables its own documentation uses for the switch, on and off
REFERENCE_KWARGS = {
    "Qwen-Qwen3-0.6B.jinja": ({"enable_thinking": True}, {"enable_thinking": False}),
    "Qwen3.5-4B.jinja": ({"enable_thinking": True}, {"enable_thinking": False}),
    "HuggingFaceTB-SmolLM3-3B.jinja": ({"enable_thinking": True}, {"enable_thinking": False}),
    "GLM-4.6.jinja": ({"enable_thinking": True}, {"enable_thinking": False}),
    "deepseek-ai-DeepSeek-V3.1.jinja": ({"thinking": True}, {"thinking": False}),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ({"thinking": True}, {"thinking": False}),
    "openai-gpt-oss-120b.jinja": ({"reasoning_effort": "medium"}, {"reasoning_effort": "low"}),
}


def reference(source: str, **kwargs) -> str:
    formatter = Jinja2ChatFormatter(source, eos_token=EOS, bos_token=BOS, add_generation_prompt=True)
    return formatter(messages=[dict(m) for m in MESSAGES], tools=None, **kwargs).prompt


@pytest.mark.parametrize("name", sorted(REFERENCE_KWARGS))
def test_thinking_on_and_off_render_as_the_reference(llamacpp_models_dir, name):
    source = (llamacpp_models_dir / "templates" / name).read_text(encoding="utf-8")
    template = ChatTemplate(name=name, source=source, bos_token=BOS, eos_token=EOS)
    assert has_thinking_switch(source)
    on_kwargs, off_kwargs = REFERENCE_KWARGS[name]
    on = template.render_text(MESSAGES, enable_thinking=True)
    off = template.render_text(MESSAGES, enable_thinking=False)
    assert on == reference(source, **on_kwargs)
    assert off == reference(source, **off_kwargs)
    assert on != off, "the switch must change the prompt"
    # auto passes nothing: the template's own default, as a caller that says nothing gets
    assert template.render_text(MESSAGES) == reference(source)


def test_qwen3_off_prefills_an_empty_think_block_and_granite_asks_for_thoughts(llamacpp_models_dir):
    qwen = (llamacpp_models_dir / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
    off = ChatTemplate(name="qwen3", source=qwen).render_text(MESSAGES, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    granite = (llamacpp_models_dir / "templates" / "ibm-granite-granite-3.3-2B-Instruct.jinja").read_text("utf-8")
    on = ChatTemplate(name="granite", source=granite).render_text(MESSAGES, enable_thinking=True)
    assert "Write your thoughts between <think></think>" in on


def test_a_template_without_a_switch_gets_only_enable_thinking(llamacpp_models_dir):
    source = (llamacpp_models_dir / "templates" / "meta-llama-Llama-3.2-3B-Instruct.jinja").read_text("utf-8")
    assert not has_thinking_switch(source)
    assert thinking_variables(source, True) == {"enable_thinking": True}
    assert thinking_variables(source, None) == {}
