"""The template tests' oracle: llama.cpp's own rendering and tokenizing of a conversation."""
from __future__ import annotations
from pathlib import Path
from templates import prompt_ids, resolve_template


def _vocab_path(name: str, llamacpp_models_dir: Path) -> Path:
    if name.startswith("ggml-vocab"):
        return llamacpp_models_dir / name
    from support.assets import asset_path

    return asset_path(name)


def _source_of(template, templates_dir: Path, oracle) -> tuple[str, str | None]:
    """(name for resolve_template, template file) and the source the reference renders."""
    if template == "own":
        return ("model", None), oracle.llm.metadata["tokenizer.chat_template"]
    if template.endswith(".jinja"):
        path = templates_dir / template
        return ("auto", path), path.read_text(encoding="utf-8")
    from importlib import resources

    from templates.resolve import BUILTINS

    return (template, None), resources.files("templates").joinpath(BUILTINS[template][0]).read_text(encoding="utf-8")


def _oracle_spans(text: str, messages: list[dict], specials: dict[str, int]) -> list[tuple[int, int]]:
    """Where the messages holding control-token text sit in the reference text (found in order)."""
    spans, pos = [], 0
    for message in messages:
        core = message["content"].strip()
        if not any(s in core for s in specials):
            continue
        start = text.find(core, pos)
        assert start >= 0, f"reference text lacks message {core[:30]!r}"
        spans.append((start, start + len(core)))
        pos = start + len(core)
    return spans


def _s(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
