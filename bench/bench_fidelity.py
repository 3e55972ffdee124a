"""Fidelity: does each backend compute the same model as llama.cpp on the same GGUF?

Two measures, each against llama.cpp on the same file (the reference engine):

1. **teacher-forced next-token agreement**: along a held text (``HELD_TEXT``,
   a few hundred ids), the backend is given every prefix and greedily picks
   the next id (temperature 0, no penalty: the argmax of its logits); the
   share of positions where its pick equals llama.cpp's.  Each prefix is a
   one-id ``generate`` through the public :class:`backends.base.Backend` API,
   so the engines' prefix caches make it one evaluated id per position.
2. **greedy continuation**: for a handful of chat prompts, how many ids the
   backend's greedy reply (tokchat's default chain at temperature 0, repeat
   penalty 1.1 over the last 64 ids included) shares with llama.cpp's from
   the start; a reply identical to the end counts in full.

A third column answers "which engine is right?": the same weights dequantized
to F32 by llama.cpp's own quantize API (``llama_model_quantize``, exact: a
Q4_1 block dequantizes to floats without loss) and run by llama.cpp in full
precision.  On SmolLM2 Q4_1 MLX agrees with that exact computation at every
position, while llama.cpp's own Q4_1 kernel (8-bit quantized activations in
its dot products) agrees with it at about 97%: most of the remaining
llama.cpp-vs-MLX gap is llama.cpp's arithmetic, not MLX's loader.  The last
column is the greedy replies against llama.cpp's on those exact weights: with
the arithmetic the same, the same settings give the same reply.

Ids come from tokchat's own tokenizer (id for id with llama.cpp).  No timing
here: this is about answers, not speed.

    .venv/bin/python bench/bench_fidelity.py [--model GGUF] [--backends mlx,openvino] [--positions N] [--no-exact]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from backends.base import LoadOptions, SamplingParams, common_prefix_length  # noqa: E402

REFERENCE = "llama.cpp"
ENGINES = ("llama.cpp", "mlx", "openvino")
#: a held text: plain English prose written for this bench (not from any training set we know of)
HELD_TEXT = (
    "The lighthouse keeper kept a notebook on the shelf above the stove. Every evening he wrote down the "
    "direction of the wind, the colour of the sea and the names of the ships that passed before dark. Most "
    "entries were short, because most days were the same: grey water, a fishing boat or two, gulls on the "
    "railing. In the spring of the third year a storm came in from the west and lasted four days. The lamp "
    "had to be wound by hand every two hours, and the keeper slept in his chair between the turns. On the "
    "second night a cargo ship lost its engine and drifted toward the rocks north of the island. He watched "
    "its lights through the rain and signalled with the lamp until the coast guard arrived at dawn. The crew "
    "was taken off safely, and the ship was towed to the harbour a week later. When the weather cleared, the "
    "keeper walked along the shore and found pieces of timber, a wooden crate of oranges and a child's red "
    "boot. He kept the boot on the windowsill for many years. Visitors sometimes asked about it, and he "
    "always told them the same thing: that the sea returns what it takes, but never to the person who lost "
    "it. Later, when the light was automated and the keeper moved to the mainland, he gave the notebooks to "
    "the village library, where they are still kept in a glass case near the door. Children read them on "
    "rainy afternoons and try to guess which ships the keeper saw, and whether any of them still sail."
)
PROMPTS = (
    "List three fruits, one per line.",
    "What is the opposite of hot? Explain briefly.",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a CPU does in one sentence.",
    "Name three colors of the rainbow.",
)
CHATML = "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
#: teacher forcing: the argmax of the logits
ARGMAX = SamplingParams(temperature=0, repeat_penalty=1.0, max_tokens=1)
#: the continuation: tokchat's default chain, greedy
CONTINUATION = SamplingParams(temperature=0, max_tokens=48)


@dataclass
class Fidelity:
    """One backend's agreement with llama.cpp."""

    engine: str
    positions: int = 0
    agreeing: int = 0
    #: positions agreeing with llama.cpp on the exact (F32-dequantized) weights; None: not measured
    exact_agreeing: int | None = None
    #: per prompt: ids shared with llama.cpp's greedy reply from the start, and the reply length
    shared: list[tuple[int, int]] = field(default_factory=list)
    #: the same against llama.cpp's greedy replies on the exact (F32-dequantized) weights
    exact_shared: list[tuple[int, int]] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        return self.agreeing / self.positions if self.positions else 0.0

    @property
    def identical_replies(self) -> int:
        return sum(n == length for n, length in self.shared)

    @property
    def identical_exact_replies(self) -> int:
        return sum(n == length for n, length in self.exact_shared)


def dequantized_copy(path: Path, target: Path, log: Path | None = None) -> Path:
    """``path``'s weights dequantized to F32 by llama.cpp's quantize API: the exact model, for reference."""
    import llama_cpp

    from backends.engine_log import capture_llama_log

    capture_llama_log(log)  # the quantizer lists every tensor: into the engine log, not the terminal
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(path).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama.cpp could not dequantize {path.name}")
    return target


def load(engine: str, path: Path, log: Path):
    if engine == "llama.cpp":
        from backends.llama_cpp import LlamaCppBackend as cls
    elif engine == "openvino":
        from backends.openvino import OpenVINOBackend as cls
    else:
        from backends.mlx import MLXBackend as cls
    backend = cls()
    backend.load(path, LoadOptions(log_path=log))
    return backend


def teacher_forced(backend, ids: Sequence[int], positions: int) -> list[int]:
    """The backend's greedy pick after each of the first ``positions`` prefixes of ``ids`` (prefix >= 1 id)."""
    picks = []
    for end in range(1, min(positions, len(ids) - 1) + 1):
        picks.extend(backend.generate(list(ids[:end]), ARGMAX, ()))
    return picks


def measure(path: Path, engines: Sequence[str], positions: int, log: Path,
            exact: Path | None = None, continuation: SamplingParams = CONTINUATION) -> list[Fidelity]:
    """Load each engine alone (the reference first) and compare it with llama.cpp.

    ``exact``: an F32 copy of the same weights (:func:`dequantized_copy`); llama.cpp's picks
    on it are the exact-arithmetic reference of the extra column.
    """
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(path)
    text_ids = tokenizer.encode(HELD_TEXT)
    prompts = [tokenizer.encode(CHATML.format(q=q), special=True) for q in PROMPTS]
    stops = set(tokenizer.eog_ids)
    if "<|im_end|>" in tokenizer.special_tokens:
        stops.add(tokenizer.special_tokens["<|im_end|>"])
    picks: dict[str, list[int]] = {}
    replies: dict[str, list[list[int]]] = {}
    for engine in [REFERENCE, *[e for e in engines if e != REFERENCE]]:
        backend = load(engine, path, log)
        try:
            picks[engine] = teacher_forced(backend, text_ids, positions)
            replies[engine] = [list(backend.generate(p, continuation, stops)) for p in prompts]
        finally:
            backend.close()
    exact_picks = exact_replies = None
    if exact is not None:
        backend = load(REFERENCE, exact, log)
        try:
            exact_picks = teacher_forced(backend, text_ids, positions)
            exact_replies = [list(backend.generate(p, continuation, stops)) for p in prompts]
        finally:
            backend.close()
    results = []
    for engine in engines:
        ref, got = picks[REFERENCE], picks[engine]
        result = Fidelity(engine, positions=len(ref), agreeing=sum(a == b for a, b in zip(ref, got)))
        if exact_picks is not None:
            result.exact_agreeing = sum(a == b for a, b in zip(exact_picks, got))
        result.shared = _shared(replies[engine], replies[REFERENCE])
        if exact_replies is not None:
            result.exact_shared = _shared(replies[engine], exact_replies)
        results.append(result)
    return results


def _shared(mine: Sequence[list[int]], theirs: Sequence[list[int]]) -> list[tuple[int, int]]:
    """Per prompt: the ids ``mine`` shares with ``theirs`` from the start, and ``theirs``' length."""
    return [(len(b) if a == b else common_prefix_length(a, b), len(b)) for a, b in zip(mine, theirs)]


def table(results: Sequence[Fidelity], model: str, continuation: SamplingParams = CONTINUATION) -> str:
    exact = results[0].exact_agreeing is not None
    lines = [
        f"Fidelity against llama.cpp on {model} (teacher-forced: {results[0].positions} positions of a held "
        f"text, argmax; continuation: {len(PROMPTS)} chat prompts, greedy, default penalty, "
        f"{continuation.max_tokens} ids at most)",
        "",
        "| backend | next-token agreement with llama.cpp |"
        + (" with the exact F32 weights |" if exact else "")
        + " greedy replies identical | ids shared (mean / min) |"
        + (" greedy replies identical with the exact weights |" if exact else ""),
        "|---|---:|" + ("---:|" if exact else "") + "---:|---:|" + ("---:|" if exact else ""),
    ]
    for r in results:
        shared = [n for n, _ in r.shared]
        exact_cell = f" {100 * r.exact_agreeing / r.positions:.1f}% |" if exact else ""
        exact_replies = f" {r.identical_exact_replies}/{len(r.exact_shared)} |" if exact else ""
        lines.append(f"| {r.engine} | {100 * r.agreement:.1f}% ({r.agreeing}/{r.positions}) |{exact_cell} "
                     f"{r.identical_replies}/{len(r.shared)} | {sum(shared) / len(shared):.1f} / {min(shared)} |"
                     + exact_replies)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a GGUF (default: the SmolLM2 Q4_1 test asset)")
    parser.add_argument("--backends", default=",".join(ENGINES), help="comma-separated, of " + ", ".join(ENGINES))
    parser.add_argument("--positions", type=int, default=300, help="teacher-forced positions of the held text")
    parser.add_argument("--no-exact", action="store_true",
                        help="skip the exact-arithmetic column (an F32 copy of the weights, run by llama.cpp)")
    args = parser.parse_args(argv)
    if args.model is None:
        from support.assets import asset_path

        args.model = asset_path("smollm2.gguf")
    engines = [e.strip() for e in args.backends.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        parser.error(f"unknown backend {unknown[0]!r}: choose from {', '.join(ENGINES)}")
    log = Path(tempfile.gettempdir()) / "tokchat-bench-engine.log"
    with tempfile.TemporaryDirectory() as tmp:
        exact = None if args.no_exact else dequantized_copy(args.model, Path(tmp) / "f32.gguf", log)
        results = measure(args.model, engines, args.positions, log, exact)
    print(table(results, args.model.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
