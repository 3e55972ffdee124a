"""Constrained replies (issue 46) on real-world JSON Schemas: coverage, validity, speed, side by side.

Schemas: ``bench/data/jsonschemabench_sample.jsonl``, 30 schemas of up to 100 kB from each of
JSONSchemaBench's ten categories (github.com/guidance-ai/jsonschemabench, commit ba103c7, files evenly
spaced in name order; see bench/data/README.md).  One run measures:

* **compile coverage per category**: tokchat's :func:`backends.constraint.parse_constraint` (the
  checks before any engine work, then llguidance) and the grammar compiled against
  Qwen2.5-Coder-0.5B's vocabulary as tokchat reads it; beside it, with ``--server``, whether
  ``llama-server`` (the test asset, the same llama.cpp) takes the same schema in ``json_schema``
  (a request of one id: its converter refuses what it cannot turn into GBNF; what it silently
  leaves out is not counted here);
* **replies**: for the first ``--per-category`` compiled schemas of each category whose text is
  short enough to put in the prompt, a greedy reply held to the schema (tokchat's engine process,
  speculation off) and the same prompt free: how many held replies completed (finish ``stop``),
  how many of those validate with the ``jsonschema`` package (the goal: all of them), and how
  many free replies would have;
* **speed**: generation tok/s after the first id for the held and the free replies (the ids'
  arrival times, medians), and the mask time per id (``stats.mask_ms``);
* **speculation** (``--speculation N``): a copy-heavy reply (the prompt holds a JSON record and asks
  for it back exactly), held to that record's schema and free, each with n-gram speculation off and
  on, N paired rounds: the speed-up speculation gives the held reply against the one it gives the
  free reply (the goal: the held reply keeps at least 80% of it; drafted ids the grammar refuses
  are cut before verification, so a constraint can only shorten drafts).

    .venv/bin/python bench/bench_structured.py [--model qwen2.5-coder-1.5b.gguf] [--per-category 2]
        [--max-tokens 160] [--server] [--speculation 3]

The table goes to stdout as Markdown (docs/structured.md keeps the latest), with the CPU and
load average it ran under.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "backends"))

DATA = ROOT / "bench" / "data" / "jsonschemabench_sample.jsonl"
#: the longest schema text put in a prompt (longer ones are compiled but not generated: prompt time)
PROMPT_SCHEMA_CHARS = 800


@dataclass
class Category:
    name: str
    schemas: int = 0
    compiled: int = 0
    server_took: int | None = None
    held: int = 0
    completed: int = 0
    valid: int = 0
    free_valid: int = 0
    refusals: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_schemas() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def compile_all(rows: list[dict], vocab) -> dict[str, Category]:
    """Coverage: parse_constraint, then a matcher on the real vocabulary; the refusal's first words counted."""
    from backends.constraint import ConstraintError, parse_constraint

    cats: dict[str, Category] = {}
    for row in rows:
        cat = cats.setdefault(row["category"], Category(row["category"]))
        cat.schemas += 1
        try:
            row["constraint"] = constraint = parse_constraint("json_schema", json.dumps(row["schema"]))
            vocab.start(constraint)
        except ConstraintError as exc:
            row["constraint"] = None
            cat.refusals[str(exc).split(":")[1].strip()[:40] if ":" in str(exc) else str(exc)[:40]] += 1
            continue
        cat.compiled += 1
    return cats


def server_coverage(rows: list[dict], cats: dict[str, Category], model: Path) -> None:
    """Whether llama-server accepts each schema in ``json_schema`` (a one-id request)."""
    import httpx
    from support.remote_servers import LlamaServer

    with tempfile.TemporaryDirectory() as tmp:
        server = LlamaServer(model, Path(tmp), ctx=512).start()
        try:
            for cat in cats.values():
                cat.server_took = 0
            with httpx.Client(timeout=120) as client:
                for row in rows:
                    reply = client.post(server.url + "/completion", json={
                        "prompt": [16], "n_predict": 1, "json_schema": row["schema"], "cache_prompt": False})
                    row["server_ok"] = reply.status_code == 200
                    cats[row["category"]].server_took += row["server_ok"]
        finally:
            server.stop()


def prompt_ids(tokenizer, schema: dict) -> list[int]:
    text = ("Give one example JSON value that is valid under this JSON Schema. Reply with the JSON only.\n\n"
            + json.dumps(schema, separators=(",", ":")))
    return tokenizer.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", special=True)


def timed_reply(backend, tokenizer, ids, sampling):
    """(text, finish reason, ids, seconds after the first id, mask ms) of one reply."""
    generation = backend.generate(ids, sampling, tokenizer.eog_ids)
    out, first, last = [], None, None
    for token in generation:
        now = time.perf_counter()
        first = first or now
        last = now
        out.append(token)
    text = tokenizer.decode([t for t in out if t not in tokenizer.eog_ids])
    return text, generation.stats.finish_reason, len(out), (last - first) if first else 0.0, generation.stats.mask_ms


#: the copy-heavy reply of the speculation part: a record a user might paste and ask back as JSON
COPY_RECORD = {
    "id": "ord-20931", "customer": {"name": "Ada Lovelace", "email": "ada@example.org", "tier": "gold"},
    "items": [{"sku": "KB-104", "title": "mechanical keyboard", "quantity": 1, "price": 89.5},
              {"sku": "MS-221", "title": "wireless mouse", "quantity": 2, "price": 24.0},
              {"sku": "CB-007", "title": "usb-c cable, 2 m", "quantity": 3, "price": 7.25}],
    "shipping": {"street": "12 Analytical Row", "city": "London", "postcode": "W1 2AB", "country": "GB"},
    "notes": "leave the parcel with the neighbour at number 14 if nobody answers",
}


def schema_of(value) -> dict:
    """A JSON Schema that ``value``'s shape satisfies (types, required keys, no extra keys)."""
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: schema_of(v) for k, v in value.items()},
                "required": list(value), "additionalProperties": False}
    if isinstance(value, list):
        return {"type": "array", "items": schema_of(value[0]) if value else {}}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    return {"type": "string"}


def speculation(model: Path, rounds: int, max_tokens: int) -> list[str]:
    """Copy-heavy replies held and free, n-gram speculation off and on: tok/s after the first id, medians."""
    from backends.base import LoadOptions, SamplingParams
    from backends.constraint import parse_constraint
    from backends.engine_client import HostedBackend
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(model)
    record = json.dumps(COPY_RECORD, indent=2)
    text = f"Return this record as JSON, exactly as it is, with nothing around it:\n\n{record}"
    ids = tokenizer.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", special=True)
    constraint = parse_constraint("json_schema", json.dumps(schema_of(COPY_RECORD)))
    speeds: dict[tuple[str, str], list[float]] = defaultdict(list)
    same: dict[str, set] = defaultdict(set)
    with tempfile.TemporaryDirectory() as tmp:
        backends = {}
        for mode in ("off", "ngram"):
            backends[mode] = HostedBackend("llama.cpp")
            backends[mode].load(model, LoadOptions(n_ctx=4096, speculative=mode,
                                                   log_path=Path(tmp) / f"engine-{mode}.log"))
        try:
            runs = [(mode, label, c) for mode in ("off", "ngram") for label, c in (("held", constraint), ("free", None))]
            for r in range(rounds):
                for mode, label, c in (runs if r % 2 == 0 else runs[::-1]):
                    sampling = SamplingParams(temperature=0, max_tokens=max_tokens, constraint=c)
                    out, finish, count, seconds, _ = timed_reply(backends[mode], tokenizer, ids, sampling)
                    same[label].add(out)
                    if count > 1 and seconds > 0:
                        speeds[(mode, label)].append((count - 1) / seconds)
                    print(f"speculation {mode} {label}: {finish}, {count} ids, {(count - 1) / seconds:.1f} tok/s",
                          file=sys.stderr)
        finally:
            for b in backends.values():
                b.close()
    med = {k: statistics.median(v) for k, v in speeds.items()}
    up_free, up_held = med[("ngram", "free")] / med[("off", "free")], med[("ngram", "held")] / med[("off", "held")]
    kept = up_held / up_free
    return ["", f"Speculation on a copy-heavy reply ({rounds} paired rounds, tok/s after the first id, medians): "
            f"free {med[('off', 'free')]:.1f} -> {med[('ngram', 'free')]:.1f} with n-gram drafts "
            f"(**{up_free:.2f}x**); held to its schema {med[('off', 'held')]:.1f} -> {med[('ngram', 'held')]:.1f} "
            f"(**{up_held:.2f}x**): the held reply keeps **{100 * kept:.0f}%** of the free reply's speed-up "
            f"(held/free with drafts {med[('ngram', 'held')] / med[('ngram', 'free')]:.2f}x). Replies the same with "
            f"and without drafts: held {len(same['held']) == 1}, free {len(same['free']) == 1}."]


def generate(rows, cats, model: Path, per_category: int, max_tokens: int,
             deadline: float | None = None) -> dict[str, list[float]]:
    from backends.base import LoadOptions, SamplingParams
    from backends.constraint import check_reply
    from backends.engine_client import HostedBackend
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(model)
    speeds: dict[str, list[float]] = {"held": [], "free": [], "mask_per_id": []}
    chosen = defaultdict(list)
    for row in rows:
        text = json.dumps(row["schema"], separators=(",", ":"))
        if row.get("constraint") is not None and len(text) <= PROMPT_SCHEMA_CHARS:
            if len(chosen[row["category"]]) < per_category:
                chosen[row["category"]].append(row)
    with tempfile.TemporaryDirectory() as tmp:
        backend = HostedBackend("llama.cpp")
        backend.load(model, LoadOptions(n_ctx=4096, speculative="off", log_path=Path(tmp) / "engine.log"))
        try:
            for n, row in enumerate(r for rs in chosen.values() for r in rs):
                ids = prompt_ids(tokenizer, row["schema"])
                cat = cats[row["category"]]
                runs = [("held", row["constraint"]), ("free", None)]
                if n % 2:
                    runs.reverse()  # alternate the order: a machine's load drifts
                for label, constraint in runs:
                    sampling = SamplingParams(temperature=0, max_tokens=max_tokens, constraint=constraint)
                    text, finish, count, seconds, mask_ms = timed_reply(backend, tokenizer, ids, sampling)
                    if count > 1 and seconds > 0:
                        speeds[label].append((count - 1) / seconds)
                    if label == "held":
                        cat.held += 1
                        speeds["mask_per_id"].append(mask_ms / max(count, 1))
                        if finish == "stop":
                            cat.completed += 1
                            problem = check_reply(row["constraint"], text)
                            cat.valid += problem is None
                            if problem is not None:
                                print(f"INVALID {row['file']}: {problem}\n{text[:300]}", file=sys.stderr)
                    else:
                        cat.free_valid += check_reply(row["constraint"], text.strip().strip("`").removeprefix(
                            "json").strip()) is None
                    print(f"{row['file']} {label}: {finish}, {count} ids, "
                          f"{(count - 1) / seconds if seconds > 0 else 0:.1f} tok/s, mask {mask_ms:.1f} ms",
                          file=sys.stderr)
                if deadline is not None and time.monotonic() > deadline:
                    print("time limit reached: the replies so far are counted", file=sys.stderr)
                    break
        finally:
            backend.close()
    return speeds


def table(cats: dict[str, Category], speeds, args, started: float) -> str:
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {cpu_name()} ({os.cpu_count()} "
             f"CPUs, load average {os.getloadavg()[0]:.1f} at the end), {args.model}, greedy, "
             f"--max-tokens {args.max_tokens}, {time.time() - started:.0f} s.", "",
             "| category | schemas | tokchat compiles | llama-server takes | held replies | completed | "
             "completed that validate | free replies that validate |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    total = Category("all")
    for cat in sorted(cats.values(), key=lambda c: c.name):
        server = "-" if cat.server_took is None else f"{cat.server_took} ({100 * cat.server_took / cat.schemas:.0f}%)"
        lines.append(f"| {cat.name} | {cat.schemas} | {cat.compiled} ({100 * cat.compiled / cat.schemas:.0f}%) | "
                     f"{server} | {cat.held} | {cat.completed} | {cat.valid} | {cat.free_valid} |")
        for name in ("schemas", "compiled", "held", "completed", "valid", "free_valid"):
            setattr(total, name, getattr(total, name) + getattr(cat, name))
        if cat.server_took is not None:
            total.server_took = (total.server_took or 0) + cat.server_took
    server = "-" if total.server_took is None else f"{total.server_took} ({100 * total.server_took / total.schemas:.0f}%)"
    lines.append(f"| **all** | {total.schemas} | {total.compiled} ({100 * total.compiled / total.schemas:.0f}%) | "
                 f"{server} | {total.held} | {total.completed} | {total.valid} | {total.free_valid} |")
    refusals = defaultdict(int)
    for cat in cats.values():
        for why, n in cat.refusals.items():
            refusals[why] += n
    lines += ["", "tokchat's refusals, by their first words: " + "; ".join(
        f"{why} ({n})" for why, n in sorted(refusals.items(), key=lambda kv: -kv[1]))]
    if speeds and speeds["held"] and speeds["free"]:
        held, free = statistics.median(speeds["held"]), statistics.median(speeds["free"])
        lines += ["", f"Speed (medians over {len(speeds['held'])} replies each): held {held:.1f} tok/s, free "
                  f"{free:.1f} tok/s: **{held / free:.2f}x**; mask time {statistics.median(speeds['mask_per_id']):.2f} "
                  "ms per id (median of the replies' means)."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b.gguf", help="a test asset's name")
    parser.add_argument("--speculation", type=int, default=0, metavar="N",
                        help="N paired rounds of the copy-heavy reply, speculation off and on (0: skip)")
    parser.add_argument("--per-category", type=int, default=2, help="replies generated per category (0: none)")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--server", action="store_true", help="also ask llama-server to take each schema")
    parser.add_argument("--time-limit", type=float, default=None, metavar="S",
                        help="stop generating after S seconds (the table counts the replies made)")
    args = parser.parse_args()
    from support.assets import asset_path

    from backends.constraint import GrammarVocabulary
    from tokenizer import load_tokenizer

    started = time.time()
    model = asset_path(args.model)
    tokenizer = load_tokenizer(model)
    rows = load_schemas()
    cats = compile_all(rows, GrammarVocabulary(tokenizer, tokenizer.eog_ids))
    if args.server:
        server_coverage(rows, cats, model)
    deadline = time.monotonic() + args.time_limit if args.time_limit else None
    speeds = (generate(rows, cats, model, args.per_category, args.max_tokens, deadline)
              if args.per_category else None)
    extra = speculation(model, args.speculation, 400) if args.speculation else []
    print("\n".join([table(cats, speeds, args, started), *extra]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
