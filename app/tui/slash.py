"""Slash commands: parsing and the help text (the app carries them out).

A line that starts with ``/`` followed by a known command name is a command;
anything else (including ``//text``, which sends ``/text``) is a prompt.
Bad arguments raise :class:`SlashError` with a message that says what to type.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from backends.base import SamplingParams

#: command -> (argument hint, what it does); the palette and /help list these
COMMANDS: dict[str, tuple[str, str]] = {
    "new": ("", "start a new conversation (system prompt back to the configured one)"),
    "clear": ("", "clear this conversation's turns, keeping the system prompt and settings"),
    "system": ("TEXT", "set the system prompt (empty: none)"),
    "template": ("NAME", "switch chat template: auto | model | chatml | llama3 | gemma"),
    "think": ("on|off|budget N", "thinking on or off as the template defines it; budget N: close the think "
              "block after N tokens (off or -1: no limit); remembered for this model"),
    "temp": ("X", "sampling temperature (0 = greedy)"),
    "top_p": ("X", "nucleus sampling threshold"),
    "top_k": ("N", "keep the N most likely tokens"),
    "min_p": ("X", "drop tokens below this fraction of the top probability"),
    "repeat_penalty": ("X", "penalty for repeated tokens (1 = off)"),
    "max_tokens": ("N", "most tokens in one reply"),
    "seed": ("N|none", "random seed"),
    "format": ("json|schema FILE|regex P|grammar FILE|off", "hold the replies to JSON, a JSON Schema, a regex or "
               "a grammar while they are sampled (shown in the model bar); off: free text"),
    "regen": ("", "regenerate the last reply"),
    "continue": ("", "continue the last reply (cut by max_tokens or stopped) from its ids (Ctrl+L)"),
    "reply": ("[TEXT]", "a new reply to the last prompt that starts with TEXT (the model continues it); "
              "alone: edit the last reply, then Enter continues from your edit"),
    "fork": ("[N]", "a new conversation holding the messages up to message N (default: all); "
             "the history links it to this one"),
    "edit": ("", "put the last prompt back in the box; Enter resends it in its place"),
    "copy": ("[code [N]]", "copy the last reply, or its Nth code block (default: the last)"),
    "export": ("[PATH]", "write this conversation as Markdown, or JSON if PATH ends in .json "
               "(default: ./tokchat-<time>.md)"),
    "stats": ("", "totals for this conversation"),
    "tools": ("", "the MCP tools the model can call, and what their schemas cost in tokens"),
    "model": ("[PATH|hf:REF]", "open another model: none opens the picker; hf:ORG/REPO:QUANT or a preset "
              "name downloads it first"),
    "server": ("URL|NAME|off", "generate on an inference server (llama-server, vLLM, SGLang), or back to local"),
    "history": ("", "show or hide the history sidebar"),
    "attach": ("PATH|clear", "attach a text file (or a directory's files) to the next message; "
               "@path in a message does it too"),
    "branch": ("[N|next|prev]", "show another sibling of the last regenerated reply or edited prompt "
               "(Alt+Left / Alt+Right)"),
    "compact": ("drop|summarize|refuse|undo|edit TEXT", "when the conversation outgrows the context: drop the "
                "oldest turns, summarize them first, or refuse the send (this chat); undo / edit the summary "
                "in the prompt"),
    "pin": ("[-]N", "keep message N's turn in the prompt whatever the compaction (-N unpins; alone: list)"),
    "tokens": ("", "the token inspector: the last turn's exact ids, pieces and context breakdown"),
    "help": ("", "list commands and keys"),
}

#: sampling command (and accepted spellings) -> SamplingParams field
SAMPLING: dict[str, str] = {
    "temp": "temperature", "temperature": "temperature", "top_p": "top_p", "top-p": "top_p",
    "top_k": "top_k", "top-k": "top_k", "min_p": "min_p", "min-p": "min_p",
    "repeat_penalty": "repeat_penalty", "repeat-penalty": "repeat_penalty",
    "max_tokens": "max_tokens", "max-tokens": "max_tokens", "seed": "seed",
}


class SlashError(ValueError):
    """A slash command with a bad or missing argument; the message says what to type."""


@dataclass(frozen=True)
class SlashCommand:
    name: str  # canonical name: a key of COMMANDS
    arg: str


def parse_slash(text: str) -> SlashCommand | None:
    """``"/temp 0.2"`` -> ``SlashCommand("temp", "0.2")``; None for a prompt.

    An unknown ``/word`` is an error rather than a prompt, so a typo never
    reaches the model by accident.
    """
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    name, _, arg = stripped[1:].partition(" ")
    name = name.lower()
    if name in SAMPLING:
        name = "temp" if SAMPLING[name] == "temperature" else SAMPLING[name]
    if name not in COMMANDS:
        raise SlashError(f"unknown command /{name}: type /help for the list")
    return SlashCommand(name, arg.strip())


def unescape_prompt(text: str) -> str:
    """``//text`` sends ``/text``."""
    return text.strip()[1:] if text.strip().startswith("//") else text


def apply_sampling(sampling: SamplingParams, name: str, arg: str) -> SamplingParams:
    """A copy of ``sampling`` with one setting changed, validated."""
    field_name = SAMPLING[name]
    kind = {f.name: f.type for f in fields(SamplingParams)}[field_name]
    if not arg:
        return sampling
    value: int | float | None
    try:
        if field_name == "seed":
            value = None if arg.lower() == "none" else int(arg)
        elif field_name in ("top_k", "max_tokens"):
            value = int(arg)
        else:
            value = float(arg)
    except ValueError:
        raise SlashError(f"/{name} needs a {'whole ' if 'int' in str(kind) else ''}number, not {arg!r}") from None
    limits = {"temperature": (0, 5), "top_p": (0, 1), "min_p": (0, 1), "repeat_penalty": (0.5, 3),
              "top_k": (0, 100_000), "max_tokens": (1, 1_000_000)}
    if field_name in limits and value is not None:
        low, high = limits[field_name]
        if not low <= value <= high:
            raise SlashError(f"/{name} must be between {low} and {high}, not {arg}")
    changes: dict[str, Any] = {field_name: value}  # the field named by the command: its type was parsed above
    return replace(sampling, **changes)


def parse_on_off(arg: str, command: str) -> bool:
    value = arg.strip().lower()
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise SlashError(f"/{command} needs on or off, not {arg!r}")


def help_text(bindings: list[tuple[str, str]]) -> str:
    """The /help block: commands, then keys."""
    lines = ["Commands:"]
    for name, (hint, what) in COMMANDS.items():
        lines.append(f"  /{name}{' ' + hint if hint else ''}  -  {what}")
    lines.append("Keys:")
    lines.extend(f"  {key}  -  {what}" for key, what in bindings)
    return "\n".join(lines)
