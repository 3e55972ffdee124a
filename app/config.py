"""Configuration: placeholder merge of CLI flags over defaults until the config issue lands."""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from app.options import ChatOptions

_SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "max_tokens", "seed")
_OPTION_FLAGS = ("model", "prompt", "system", "template", "backend", "device", "ctx", "think",
                 "show_thinking", "stats", "history", "theme")


def chat_options(args: argparse.Namespace) -> ChatOptions:
    """Flags given on the command line, over the built-in defaults."""
    options = ChatOptions()
    for name in _OPTION_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            setattr(options, name, value)
    if getattr(args, "template_file", None):
        options.template_file = Path(args.template_file)
    sampling = options.sampling
    for name in _SAMPLING_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            sampling = replace(sampling, **{name: value})
    options.sampling = sampling
    return options
