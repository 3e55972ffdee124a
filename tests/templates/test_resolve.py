"""What ``--template auto`` picks for each test model, and the fallback for broken or hostile templates."""
from __future__ import annotations

import json
import shutil
import pytest

from templates import TemplateError, builtin, resolve_template

MALICIOUS = {
    "class-walk": "{% for c in ''.__class__.__mro__[1].__subclasses__() %}{{ c }}{% endfor %}",
    "file-read": "{% include '/etc/passwd' %}",
    "endless-loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "syntax-error": "{% for message in messages %}",
}


@pytest.mark.parametrize("asset", ["smollm_path", "qwen_path", "qwen_tokenizer_dir"])
def test_auto_uses_the_models_own_template(asset, request, load_ours):
    template, notice = resolve_template("auto", load_ours(request.getfixturevalue(asset)))
    assert (template.name, notice) == ("model", None)


def test_auto_detects_llama3_for_a_tokenizer_without_template(llama32_tokenizer_dir, load_ours):
    tokenizer = load_ours(llama32_tokenizer_dir)  # this tokenizer_config.json has no chat_template
    template, notice = resolve_template("auto", tokenizer)
    assert template.name == "llama3"
    assert notice == ("the model has no chat template; using the built-in llama3 template "
                      "(the vocabulary has <|start_header_id|>)")


def test_auto_detects_gemma_when_the_gguf_has_no_template(gemma_path, load_ours):
    tokenizer = load_ours(gemma_path)
    assert tokenizer.chat_template is None
    template, notice = resolve_template("auto", tokenizer)
    assert template.name == "gemma"
    assert notice == ("the model has no chat template; using the built-in gemma template "
                      "(the vocabulary has <start_of_turn>)")


def _with_template(source_dir, tmp_path, chat_template: str):
    """A copy of a real tokenizer folder whose tokenizer_config.json holds ``chat_template``."""
    folder = tmp_path / "tok"
    shutil.copytree(source_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = chat_template
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize("source", MALICIOUS.values(), ids=MALICIOUS.keys())
def test_malicious_template_falls_back_with_a_notice(source, qwen_tokenizer_dir, tmp_path):
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(_with_template(qwen_tokenizer_dir, tmp_path, source))
    template, notice = resolve_template("auto", tokenizer)
    assert template.name == "chatml-think"  # this Qwen vocabulary has <think> as an added token
    assert notice.startswith("the model's chat template cannot be used (")
    assert notice.endswith("using the built-in chatml-think template (the vocabulary has <|im_start|>)")
    assert "\n" not in notice
    with pytest.raises(TemplateError, match="cannot be used"):
        resolve_template("model", tokenizer)


def test_fallback_family_comes_from_the_broken_templates_markers(llama32_tokenizer_dir, tmp_path):
    from tokenizer import load_tokenizer

    broken = "<|start_header_id|>{{ messages[0].content.__class__ }}"
    tokenizer = load_tokenizer(_with_template(llama32_tokenizer_dir, tmp_path, broken))
    template, notice = resolve_template("auto", tokenizer)
    assert template.name == "llama3"
    assert notice.endswith("(its template uses <|start_header_id|>)")


def test_explicit_choices(smollm_path, load_ours, tmp_path):
    tokenizer = load_ours(smollm_path)
    assert resolve_template("llama3", tokenizer)[0].name == "llama3"
    with pytest.raises(TemplateError, match="unknown template 'vicuna'"):
        resolve_template("vicuna", tokenizer)
    with pytest.raises(TemplateError, match="cannot read template file"):
        resolve_template("auto", tokenizer, tmp_path / "missing.jinja")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{{ raise_exception('nope') }}", encoding="utf-8")
    with pytest.raises(TemplateError, match="nope"):
        resolve_template("auto", tokenizer, bad)
    good = tmp_path / "mine.jinja"
    good.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}", encoding="utf-8")
    template, notice = resolve_template("auto", tokenizer, good)
    assert (template.name, notice) == ("mine.jinja", None)
    assert template.render([{"role": "user", "content": "hi"}]).text == "[user] hi\n"


def test_model_choice_without_a_template_is_an_error(gemma_path, load_ours):
    with pytest.raises(TemplateError, match="has no chat template"):
        resolve_template("model", load_ours(gemma_path))


def test_chatml_turns_into_the_thinking_variant_for_vocabularies_with_think(
        qwen_tokenizer_dir, smollm_path, load_ours):
    assert builtin("chatml", load_ours(smollm_path)).name == "chatml"
    template = builtin("chatml", load_ours(qwen_tokenizer_dir))  # has <think> as an added token
    assert (template.name, template.supports_thinking) == ("chatml-think", True)
    off = template.render([{"role": "user", "content": "hi"}], enable_thinking=False).text
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    default = template.render([{"role": "user", "content": "hi"}]).text
    assert default.endswith("<|im_start|>assistant\n")


def test_system_is_folded_for_templates_without_a_system_role(templates_dir, gemma_path, load_ours):
    template, _ = resolve_template("auto", load_ours(gemma_path), templates_dir / "google-gemma-2-2b-it.jinja")
    assert template.supports_system is False
    text = template.render([{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hi"}]).text
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
