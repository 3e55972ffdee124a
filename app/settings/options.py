"""The settings one chat runs with, after config files and CLI flags are merged.

:func:`app.models.preset_match.chat_options` builds this from ``configs/default.toml``, the
user's ``config.toml`` and the command line (flags win); the TUI and the
headless mode only ever read a :class:`ChatOptions`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from backends.base import SamplingParams
from backends.remote import RemoteSettings

if TYPE_CHECKING:
    from app.conversation.attachments import AttachLimits
    from app.settings.tools import ToolSettings
    from backends.model_meta import ModelMeta


@dataclass
class ChatOptions:
    """Everything a chat needs to start."""

    #: a .gguf path, an MLX model directory, ``hf:ORG/REPO/FILE.gguf``, or None for the bundled model
    model: str | None = None
    #: headless prompt; None opens the TUI
    prompt: str | None = None
    system: str = ""
    #: one of templates.names.NAMES: auto | model | chatml | chatml-think | llama3 | gemma
    template: str = "auto"
    template_file: Path | None = None
    #: auto | cpu | cuda | rocm | vulkan | metal | openvino | mlx
    backend: str = "auto"
    device: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: context size in tokens; None: the model's training context capped at 8192
    ctx: int | None = None
    #: llama.cpp's generation threads; None: llama.cpp's own default (its physical cores)
    threads: int | None = None
    #: layers on the GPU (llama.cpp -ngl, Ollama num_gpu); None: every layer that fits in free VRAM
    gpu_layers: int | None = None
    #: the KV cache's element types: f16 | q8_0 | q4_0, or K/V (backends.kv_types)
    kv_type: str = "f16"
    #: speculative decoding in the local engine: auto | off | ngram | draft (backends.speculative)
    speculative: str = "auto"
    #: the draft model for ``speculative = "draft"`` (a GGUF sharing the main model's vocabulary)
    draft_model: Path | None = None
    #: enable_thinking for templates that support it; None: the template's default
    think: bool | None = None
    show_thinking: bool = False
    stats: bool = False
    history: bool = True
    #: where the local engine keeps its KV state between runs (``[state]``, backends.state_cache); None: nowhere
    state_dir: Path | None = None
    #: the most those states may take on disk, in GiB
    state_max_gib: float = 4.0
    theme: str = "textual-dark"
    #: more directories ``tokchat models`` lists models from
    model_dirs: list[Path] = field(default_factory=list)
    #: TUI action -> Textual key names, comma-separated (the names and defaults: app.tui.keys, documented in
    #: configs/default.toml [keys]); the TUI's keymap
    keys: dict[str, str] = field(default_factory=dict)
    #: name of the model preset applied (configs/models/NAME.toml), if one matched
    preset: str | None = None
    #: ``model`` already resolved to a local file or directory by :func:`app.models.preset_match.chat_options`
    #: (None when it could not be: then :func:`app.models.resolution.resolve_model` says why)
    model_path: Path | None = None
    #: the header of ``model_path``, read once by :func:`app.models.preset_match.chat_options` (a
    #: :class:`backends.model_meta.ModelMeta`); the loader takes it and clears it, so it is never stale
    model_meta: ModelMeta | None = field(default=None, repr=False, compare=False)
    #: files attached to the headless ``--prompt`` (``--attach``, repeatable)
    attach: list[Path] = field(default_factory=list)
    #: size and token budgets for attachments (``[attach]`` in the config)
    attach_limits: AttachLimits | None = None
    #: tool calling (see app.settings.tools.ToolSettings): which MCP servers' tools, approval, limits
    tools: ToolSettings | None = None
    #: headless: the stored conversation to go on with (``--resume ID``); None: a new one
    resume: int | None = None
    #: headless: continue the last reply of ``resume`` instead of sending a prompt (``--continue``)
    continue_reply: bool = False
    #: headless, with ``resume``: go on although the conversation was written with another vocabulary
    #: (``--switch-model``; the switch is recorded, see app.history.model_identity)
    switch_model: bool = False
    #: reasoning ids after which tokchat closes the think block itself; None: no limit
    reasoning_budget: int | None = None
    #: what a send does when the conversation no longer fits: drop | summarize | refuse (app.conversation.compaction)
    compact: str = "drop"
    #: a paste of at least this many tokens or lines becomes an attachment chip (``[paste]``)
    paste_chip_tokens: int = 2000
    paste_chip_lines: int = 40
    #: generate on this inference server instead of a local engine (``--server``); None: local.
    #: ``model`` then names only the tokenizer and template (None: what the server serves)
    server: RemoteSettings | None = None
