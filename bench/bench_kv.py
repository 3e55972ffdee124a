"""What a quantized KV cache costs: greedy agreement with f16 and decode speed, per type, on real models.

For each model and each ``--kv-type`` (f16, q8_0, q4_0), in one process and one
run (this machine is shared: the ratios matter, not the absolute tok/s):

* **agreement**: teacher forcing over ``--positions`` ids of real text (this
  repository's README, encoded by tokchat's tokenizer): the argmax after every
  position, with the cache in that type, against the f16 cache's argmax at the
  same position; every type with flash attention on (llama.cpp's auto on the
  CPU, and what a quantized V needs), so only the cache's type differs;
* **memory**: the KV buffer llama.cpp reports at load, and what
  :mod:`backends.fit` predicted for it;
* **decode**: greedy tok/s over ``--decode`` ids after a short prompt, rounds
  alternating between the types, medians.

    python bench/bench_kv.py [--models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b] [--positions 512] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.cpu import llama_default_threads  # noqa: E402
from backends.engine_log import capture_llama_log  # noqa: E402
from backends.fit import model_need  # noqa: E402
from backends.kv_types import NAMES, parse_kv_type  # noqa: E402
from backends.llama_engine import EngineParams, LlamaEngine  # noqa: E402
from backends.model_meta import read_model_meta  # noqa: E402
from backends.offload import read_load_report  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402

ASSETS = Path.home() / ".cache" / "tokchat" / "test-assets"


def engine(path: Path, kv: str, n_ctx: int, log: Path) -> tuple[LlamaEngine, float]:
    """The engine with its cache in ``kv``, and the KV MiB llama.cpp reported loading it."""
    t = parse_kv_type(kv)
    start = log.stat().st_size if log.exists() else 0
    e = LlamaEngine(path, EngineParams(n_ctx=n_ctx, n_threads=llama_default_threads(), flash_attn="on",
                                       n_batch=512, type_k=t.ggml_k, type_v=t.ggml_v))
    with open(log, "rb") as fh:
        fh.seek(start)
        report = read_load_report(fh.read().decode("utf-8", "replace"))
    return e, report.total_mib("KV")


def argmaxes(e: LlamaEngine, ids: list[int]) -> list[int]:
    import numpy as np

    lib = e._lib
    out: list[int] = []
    e.truncate(0)
    for start in range(0, len(ids), 512):
        chunk = ids[start:start + 512]
        e.decode(chunk, logits="all")
        for i in range(len(chunk)):
            row = np.ctypeslib.as_array(lib.llama_get_logits_ith(e.ctx, i), shape=(e.n_vocab,))
            out.append(int(row.argmax()))
    return out


def decode_speed(e: LlamaEngine, prompt: list[int], n: int) -> float:
    e.truncate(0)
    e.decode(prompt)
    token, _ = e.top_choice()
    started = time.perf_counter()
    for _ in range(n):
        e.decode([token])
        token, _ = e.top_choice()
    return n / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    parser.add_argument("--positions", type=int, default=512)
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    log = capture_llama_log(Path("/tmp/tokchat-bench-kv.log"))
    text = (ROOT / "README.md").read_text()
    rows = []
    for name in args.models.split(","):
        path = ASSETS / f"{name}.gguf"
        meta = read_model_meta(path)
        ids = load_tokenizer(path).encode(text)[: args.positions]
        prompt = ids[:32]
        n_ctx = max(1024, len(ids) + args.decode + 64)
        engines, kv_mib, picks = {}, {}, {}
        for kv in NAMES:
            engines[kv], kv_mib[kv] = engine(path, kv, n_ctx, log)
            picks[kv] = argmaxes(engines[kv], ids)
        speeds: dict[str, list[float]] = {kv: [] for kv in NAMES}
        for r in range(args.rounds):
            order = NAMES[r % len(NAMES):] + NAMES[: r % len(NAMES)]
            for kv in order:
                speeds[kv].append(decode_speed(engines[kv], prompt, args.decode))
        for e in engines.values():
            e.close()
        f16 = statistics.median(speeds["f16"])
        for kv in NAMES:
            same = sum(a == b for a, b in zip(picks[kv], picks["f16"]))
            predicted = model_need(path, meta, n_ctx, parse_kv_type(kv)).kv / 2**20
            rows.append({"model": name, "kv_type": kv, "positions": len(ids), "agree": same,
                         "agree_pct": 100 * same / len(ids), "kv_mib": kv_mib[kv], "kv_mib_predicted": predicted,
                         "n_ctx": n_ctx, "decode_tok_s": statistics.median(speeds[kv]),
                         "decode_vs_f16": statistics.median(speeds[kv]) / f16, "rounds": speeds[kv]})
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"CPU: {cpu}, {llama_default_threads()} threads")
    print("| model | KV type | KV MiB (llama.cpp / predicted) | greedy agreement with f16 | decode tok/s | vs f16 |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['kv_type']} | {r['kv_mib']:.1f} / {r['kv_mib_predicted']:.1f} | "
              f"{r['agree']}/{r['positions']} ({r['agree_pct']:.1f}%) | {r['decode_tok_s']:.1f} | "
              f"{r['decode_vs_f16']:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
