"""``tokchat info``: what tokenizer a model file carries.

    tokchat info PATH [--json] [--template]

Shows the tokenizer kind and pre-tokenizer, vocabulary size, BOS/EOS and
whether the model wants a BOS, the end-of-generation tokens, the special
tokens and the chat template (first lines; ``--template`` prints it all).
Only the tokenizer is read, never the weights; for a GGUF the tensor infos are read
too and each tensor's extent checked against the file's size (a download cut short
exits 2 with one line on stderr, after the facts).
"""
from __future__ import annotations

import argparse
import json
import sys

from app.cli.tokenize import load_for_cli
from tokenizer.accel import accel_status

SHOWN_SPECIALS = 24
TEMPLATE_LINES = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", help="a .gguf file, a tokenizer.json or a directory holding one "
                                                "(default: the bundled model)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--template", action="store_true", help="print the whole chat template")


def describe(tok) -> dict:
    """The facts ``info`` shows, as plain data."""
    meta = tok.metadata

    def named(tid):
        return None if tid is None else {"id": tid, "text": tok.id_to_token(tid)}

    return {
        "source": tok.source,
        "name": meta.get("general.name"),
        "architecture": meta.get("general.architecture"),
        "kind": tok.kind,
        "pre_tokenizer": tok.pre,
        "vocab_size": tok.vocab_size,
        "bos": named(tok.bos_id),
        "eos": named(tok.eos_id),
        "add_bos": tok.add_bos,
        "eog": [named(t) for t in sorted(tok.eog_ids)],
        "special_tokens": len(tok.special_tokens),
        "chat_template": tok.chat_template,
        "speed_path": accel_status(),
    }


def weights(source: str) -> dict | None:
    """For a GGUF: how many tensors, whether any lies past the end of the file, and whether it has none at
    all (a vocabulary only: it tokenizes but cannot generate); None for other files."""
    from pathlib import Path

    from app.models.file_kind import vocabulary_only
    from tokenizer.gguf_extents import tensor_extents, truncation
    from tokenizer.gguf import read_gguf

    path = Path(source)
    if path.suffix.lower() != ".gguf" or not path.is_file():
        return None
    gguf = read_gguf(path, keys={"general.alignment"})
    problem = truncation(path, gguf)
    count = gguf.tensor_count if problem else len(tensor_extents(path, gguf)[0])
    return {"tensors": count, "problem": problem, "vocabulary_only": vocabulary_only(gguf)}


def _line(label: str, value: object) -> str:
    return f"{label:<16}{value}"


def run(args: argparse.Namespace) -> int:
    from app.errors import CLIError
    from tokenizer.errors import TokenizerError

    try:
        tok = load_for_cli(args.path)
    except TokenizerError as exc:  # the reader's reason, with the file it was reading (one line)
        if args.path and args.path not in str(exc):
            raise CLIError(f"{args.path}: {exc}") from None
        raise
    facts = describe(tok)
    facts["weights"] = weights(str(facts["source"]))
    problem = (facts["weights"] or {}).get("problem")
    from app.cli.terminal import shown, shown_json

    # metadata, token texts and the template come from the file: inert on a terminal, exact to a pipe
    if args.json:
        print(shown_json(json.dumps(facts, ensure_ascii=False, indent=2)))
        if problem:
            print(shown(f"tokchat: {problem}", sys.stderr), file=sys.stderr)
        return 2 if problem else 0
    if args.template:
        sys.stdout.write(shown((tok.chat_template or "") + "\n"))
        return 0

    def show(entry):
        return "none" if entry is None else f"{entry['id']} {entry['text']!r}"

    out = [_line("file", facts["source"])]
    if facts["name"] or facts["architecture"]:
        out.append(_line("model", f"{facts['name'] or '?'} ({facts['architecture'] or '?'})"))
    kind = {"bpe": "byte-pair encoding", "spm": "SentencePiece-style BPE", "wpm": "WordPiece, BERT",
            "wordpiece": "WordPiece, BERT", "ugm": "Unigram, SentencePiece",
            "unigram": "Unigram, SentencePiece"}.get(tok.kind, tok.kind)
    out += [
        _line("tokenizer", f"{tok.kind} ({kind})" + (f", pre-tokenizer {tok.pre}" if tok.pre else "")),
        _line("vocabulary", f"{tok.vocab_size} tokens"),
        _line("speed path", facts["speed_path"]),
        _line("bos", show(facts["bos"]) + ("  (added to prompts)" if tok.add_bos else "")),
        _line("eos", show(facts["eos"])),
        _line("end of turn", ", ".join(show(e) for e in facts["eog"]) or "none"),
    ]
    specials = sorted(tok.special_tokens.items(), key=lambda kv: kv[1])
    listed = ", ".join(f"{tid} {text!r}" for text, tid in specials[:SHOWN_SPECIALS])
    more = f" … and {len(specials) - SHOWN_SPECIALS} more" if len(specials) > SHOWN_SPECIALS else ""
    out.append(_line("special tokens", f"{len(specials)}: {listed}{more}" if specials else "none"))
    template = tok.chat_template
    if template:
        lines = template.splitlines()
        out.append(_line("chat template", f"{len(template)} characters, {len(lines)} lines"))
        out += ["    " + line for line in lines[:TEMPLATE_LINES]]
        if len(lines) > TEMPLATE_LINES:
            out.append("    … (tokchat info --template shows it all)")
    else:
        out.append(_line("chat template", "none"))
    if facts["weights"] is not None:
        state = ("CUT SHORT (see below)" if problem else
                 "vocabulary only (no weights): a tokenizer, not a model to chat with"
                 if facts["weights"]["vocabulary_only"] else "all inside the file")
        out.append(_line("tensors", f"{facts['weights']['tensors']}, {state}"))
    print(shown("\n".join(out)))
    if problem:
        print(shown(f"tokchat: {problem}", sys.stderr), file=sys.stderr)
        return 2
    return 0
