"""``tokchat [--model PATH] [--prompt TEXT]``: the chat itself, TUI or headless.

The flags here are the whole chat surface; :mod:`app.settings.config` merges them
over the config files into one :class:`app.settings.options.ChatOptions`.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from typing import BinaryIO

from app.cli.ids import conversation_id
from app.errors import CLIError
from templates.names import NAMES as TEMPLATE_NAMES


def add_arguments(parser: argparse._ActionsContainer) -> None:
    """The chat's flags, on a parser or on one of its groups (``config show`` adds them as a group)."""
    add = parser.add_argument
    add("--model", "-m", help="a .gguf file, an MLX model directory, hf:ORG/REPO/FILE.gguf, hf:ORG/REPO:QUANT "
        "or a preset name, downloaded on first use (default: the bundled SmolLM2-135M-Instruct)")
    add("--prompt", "-p", help="answer one prompt headless, streaming to stdout (or pipe the prompt on stdin); "
        "on a terminal escape sequences in the reply are shown as text (\\x1b), to a pipe or file it is exact")
    add("--attach", action="append", metavar="PATH",
        help="attach a text file to the --prompt message (repeat for several)")
    add("--system", "-s", help="system prompt")
    add("--template", choices=TEMPLATE_NAMES,
        help="chat template (default auto: the model's own if it renders, else the detected family)")
    add("--template-file", help="a Jinja chat template file to use instead")
    add("--backend", choices=["auto", "cpu", "cuda", "rocm", "vulkan", "metal", "openvino", "mlx"],
        help="inference backend (default auto; see `tokchat doctor`)")
    add("--device", choices=["CPU", "GPU", "NPU"], help="OpenVINO device")
    sampling = parser.add_argument_group(
        "sampling", "One meaning on every backend, llama.cpp's: repeat penalty over the last --repeat-last-n ids "
        "of prompt and reply -> greedy if the temperature is 0 -> top-k -> top-p -> min-p -> temperature -> "
        "a draw with the seeded generator.  OpenVINO samples with its own engine (greedy without a penalty "
        "matches).  Defaults in configs/default.toml.")
    add = sampling.add_argument
    add("--temperature", "--temp", type=float,
        help="sampling temperature, 0 = greedy (llama.cpp --temp, Ollama temperature)")
    add("--top-p", type=float, help="after top-k, keep the likeliest tokens up to this total probability; "
        "1 = off (llama.cpp --top-p, Ollama top_p)")
    add("--top-k", type=int, help="keep the k most likely tokens; 0 = off (llama.cpp --top-k, Ollama top_k)")
    add("--min-p", type=float, help="drop tokens below this fraction of the top probability; 0 = off "
        "(llama.cpp --min-p, Ollama min_p)")
    add("--repeat-penalty", type=float, help="penalty for tokens among the last --repeat-last-n ids of prompt "
        "and reply; 1 = off (llama.cpp --repeat-penalty, Ollama repeat_penalty)")
    add("--repeat-last-n", type=int, help="ids the repeat penalty looks at (default 64; 0 = none, -1 = whole "
        "context; llama.cpp --repeat-last-n, Ollama repeat_last_n)")
    add("--max-tokens", "-n", type=int, help="most tokens in one reply (llama.cpp --n-predict, Ollama num_predict)")
    add("--seed", type=int, help="random seed: the same seed and settings give the same reply on the same "
        "backend; seeds are not comparable across backends (each has its own generator)")
    add = parser.add_argument
    add("--ctx", type=int, help="context size in tokens")
    add("--threads", "-t", type=int, help="llama.cpp threads (default: llama.cpp's own, the physical cores; "
        "llama.cpp -t, Ollama num_thread)")
    add("--gpu-layers", "-ngl", type=int, dest="gpu_layers",
        help="layers on the GPU (default: all that fit in free VRAM, the rest on the CPU; 0 = CPU only; "
        "llama.cpp -ngl, Ollama num_gpu)")
    add("--kv-type", dest="kv_type", metavar="TYPE",
        help="the KV cache's element types: f16 (default), q8_0 (0.53x the memory), q4_0 (0.28x), or K/V such as "
        "q8_0/f16; a quantized V turns flash attention on (llama-server --cache-type-k/-v); `tokchat fit` shows "
        "the context each one holds")
    add("--speculative", choices=("auto", "off", "ngram", "draft"),
        help="speculative decoding in the local engine: auto (draft from the conversation's own ids, off in a "
        "reply where drafts keep failing), off, ngram (always), draft (a --draft-model); greedy replies are "
        "unchanged id for id (llama-server --spec-type)")
    add("--draft-model", metavar="PATH.gguf", help="a small model that drafts for --speculative draft; it must "
        "share the model's vocabulary (llama-server --model-draft)")
    think = parser.add_mutually_exclusive_group()
    think.add_argument("--think", dest="think", action="store_true", default=None,
                       help="enable thinking where the template supports it")
    think.add_argument("--no-think", dest="think", action="store_false", help="disable thinking")
    add("--reasoning-budget", type=int, metavar="N", help="after N reasoning ids, close the think block "
        "(the model's end-of-thinking ids) so the answer starts; -1 = no limit (llama.cpp --reasoning-budget)")
    add("--compact", choices=("drop", "summarize", "refuse"), help="when the conversation outgrows the "
        "context: drop the oldest turns (default), summarize them with the model first, or refuse the send")
    add("--resume", type=conversation_id, metavar="ID", help="headless: go on with stored conversation ID "
        "(`tokchat export --list`): --prompt adds a message, --continue continues its last reply")
    add("--continue", dest="continue_reply", action="store_true", default=False,
        help="headless, with --resume: continue the last reply (cut by --max-tokens or stopped) from its ids")
    add("--switch-model", action="store_true", default=False,
        help="with --resume: go on with a conversation written by a model of another vocabulary "
        "(refused without it); the switch is recorded in the conversation")
    add("--show-thinking", action="store_true", default=None, help="headless: print the reasoning too (to stderr)")
    add("--stats", action="store_true", default=None, help="headless: one JSON line of turn stats on stderr")
    add("--tools", help="give the model the tools of these MCP servers: all | SERVER,SERVER.TOOL,... "
        "(see [mcp.servers])")
    add("--approve-tools", action="store_true", default=None,
        help="run every tool call without asking (headless runs; see tools.auto_approve)")
    add("--no-history", dest="history", action="store_false", default=None,
        help="do not record this chat in the history database")
    add("--no-state", dest="state", action="store_false", default=None,
        help="neither load nor save the engine's KV state on disk (see [state] and `tokchat cache`)")
    add("--theme", help="Textual theme for the TUI")
    add("--offline", action="store_true", default=None,
        help="never contact the Hugging Face Hub: hf: models come from the cache (same as HF_HUB_OFFLINE=1)")
    add("--server", metavar="URL|NAME", help="generate on an inference server (llama-server, vLLM, SGLang): "
        "http(s)://HOST:PORT or a [servers.NAME] preset; --model then gives only the tokenizer")
    add("--server-kind", choices=["auto", "llamacpp", "vllm", "sglang"],
        help="the server's protocol (default auto: detected from its endpoints)")
    add("--api-key", help="the server's API key, sent as a bearer token (or set TOKCHAT_API_KEY)")
    add("--trust-server-vocab", action="store_true", default=None,
        help="skip the check that the server's token ids are ours")
    shape = parser.add_argument_group(
        "reply format", "Hold the reply to a shape while it is sampled (llguidance over tokchat's own vocabulary; "
        "a server gets it in its own field); the reply is checked again after it ends (docs/structured.md)")
    formats = shape.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", default=False, help="the reply is one JSON value")
    formats.add_argument("--json-schema", metavar="FILE|JSON", help="the reply is JSON valid under this JSON Schema "
                         "(a file, or the schema itself)")
    formats.add_argument("--regex", metavar="PATTERN", help="the reply matches this regular expression whole")
    formats.add_argument("--grammar", metavar="FILE", help="the reply is a sentence of this grammar (Lark, or "
                         "llama.cpp's GBNF)")


#: flags of the local engine only: (dest, the flag as typed)
LOCAL_ENGINE_FLAGS = (("threads", "--threads"), ("gpu_layers", "--gpu-layers"), ("speculative", "--speculative"),
                      ("draft_model", "--draft-model"))


def local_engine_flags(args: argparse.Namespace) -> str:
    """The local-engine flags given on this command line, in words ("--gpu-layers and --draft-model"), or ""."""
    given = [flag for dest, flag in LOCAL_ENGINE_FLAGS if getattr(args, dest, None) is not None]
    return " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)


def _reply_format(args: argparse.Namespace):
    """The constraint of ``--json`` / ``--json-schema`` / ``--regex`` / ``--grammar`` (None: free text)."""
    if not (args.json or args.json_schema is not None or args.regex is not None or args.grammar is not None):
        return None
    from app.chat.output_format import constraint_from_flags
    from backends.constraint import ConstraintError

    try:
        return constraint_from_flags(json=args.json, json_schema=args.json_schema, regex=args.regex,
                                     grammar=args.grammar)
    except ConstraintError as exc:
        raise CLIError(str(exc)) from exc


def read_stdin_prompt(stream: BinaryIO) -> str:
    """The prompt piped on stdin, checked as ``--attach`` checks a file (binary is refused)."""
    from app.conversation.attachments import SNIFF_BYTES, is_binary

    data = stream.read()
    if is_binary(data[:SNIFF_BYTES]):
        raise CLIError("the prompt on stdin looks binary (not text): nothing sent; pipe text, "
                       "or --attach a text file")
    text = data.decode("utf-8", "replace")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        bad = text.count("\ufffd") - data.decode("utf-8", "ignore").count("\ufffd")
        print(f"tokchat: the prompt on stdin is not valid UTF-8: {bad} invalid sequence{'s' if bad != 1 else ''} "
              "sent as \ufffd", file=sys.stderr)
    return text


def run(args: argparse.Namespace) -> int:
    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    where = "--prompt"
    if args.template is not None and args.template_file is not None:
        raise CLIError("--template and --template-file both choose the chat template: give one of them")
    if args.system is not None and args.resume is not None:
        raise CLIError(f"--system does not apply with --resume: conversation {args.resume} keeps the system prompt "
                       "it was stored with; to change it, open it in the TUI (Ctrl+B) and type /system TEXT, or "
                       "start a new conversation with --system")
    if args.switch_model and args.resume is None:
        raise CLIError("--switch-model goes on with a stored conversation under another model: give --resume ID")
    if args.continue_reply and (args.resume is None or args.prompt is not None):
        raise CLIError("--continue continues a stored reply: give --resume ID (and no --prompt)")
    if args.resume is not None and args.prompt is None and not args.continue_reply and sys.stdin.isatty():
        raise CLIError("--resume ID needs --prompt TEXT or --continue (the TUI resumes from its history, Ctrl+B)")
    if args.prompt is None and not args.continue_reply and not sys.stdin.isatty():
        args.prompt, where = read_stdin_prompt(sys.stdin.buffer), "stdin"
    if args.prompt is not None and not args.prompt.strip() and not args.attach:
        what = "empty" if not args.prompt else "only whitespace"
        raise CLIError(f"no prompt: {where} was {what}; give the question with --prompt TEXT or pipe it on stdin")
    constraint = _reply_format(args)  # a bad schema is refused here, before any engine work
    if constraint is not None and args.continue_reply:
        raise CLIError("--continue cannot hold the rest of a reply to a format yet (the grammar would start "
                       "again mid-value): continue without --json/--json-schema/--regex/--grammar")
    from app.chat.early import EarlyEngine

    early = EarlyEngine()
    if args.server is None:
        # settings, header and presets are read while this process starts and imports its library
        early.start_process(args.backend)
    try:
        # imported after the engine process started: it imports its library meanwhile (one-shot latency)
        from app.cli.pull import pull_if_missing
        from app.models.preset_match import chat_options
        from app.settings.merge import read_settings

        # first use of --model hf:... or a preset name: download with a progress bar before anything loads
        pull_if_missing(args.model or read_settings(args).values["model.default"])
        headless = args.prompt is not None or args.continue_reply
        # the TUI paints first: the preset match (which reads the model's header) runs in its load thread
        options = chat_options(args, preset=headless)
        if constraint is not None:
            options.sampling = replace(options.sampling, constraint=constraint)
        ignored = local_engine_flags(args) if options.server is not None else ""
        if ignored:
            print(f"tokchat: {ignored} set the local engine and do nothing with --server: the server's own "
                  "settings decide (llama-server -t, -ngl, --spec-type, --model-draft)", file=sys.stderr)
        if headless:
            early.start_load(options)  # the load request goes out before the chat's own modules are imported
            from app.chat.headless import run_headless
            from app.cli.terminal import shown
            from app.history.recorder import HistoryRecorder

            recorder = HistoryRecorder.from_options(
                options, notify=lambda notice: print(shown(f"tokchat: {notice}", sys.stderr), file=sys.stderr)
            )
            try:
                return run_headless(options, recorder=recorder, early=early)
            finally:
                recorder.close()
        early.start_load_on_thread(lambda: chat_options(args))  # the engine loads while Textual starts and paints
        from app.tui import run_tui

        return run_tui(options, with_preset=early.options, early=early)
    finally:
        early.close()  # what no chat adopted (a --server chat, an error before the load) goes now
