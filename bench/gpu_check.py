"""The GPU check's measurements, run by ``bench/gpu_check.sh`` once the CUDA build and the model exist.

Each part is independent and writes what it saw to ``OUT/results.json``
(one failing part does not hide the others):

* **ids**: greedy ids from tokchat's engine (in its own process, every layer
  on the GPU) against ``llama-server`` from the same build, on three chat
  prompts encoded by tokchat's tokenizer;
* **speed**: decode tok/s and prompt ids/s, tokchat against llama-server
  with its defaults, rounds alternating, medians and ratios (speculation off
  for tokchat, as llama-server's default has none; one row with ``auto``);
* **kill**: SIGKILL to the engine process mid-reply: one error line, and the
  next reply starts a new engine that answers;
* **headless**: ``tokchat --prompt ... --stats`` as a user runs it; the stats
  line must say CUDA and every layer on the GPU;
* **tui**: the real Textual app under Pilot: the model bar (the drawn text)
  says CUDA and every layer, a reply streams; an SVG of the screen is kept;
* **draft**: draft-model speculation on the GPU (issue 38's goals where a
  verified batch costs about one step).  No real pair can travel, so the main
  model's last blocks add nothing (``gpu_model.py --silent-from``) and each
  ``--drafts`` model is its first blocks, byte for byte: a draft that agrees
  as the real 0.5B agreed with the real 1.5B on the CPU bench's code rewrite
  (278 of 278 kept).  Each draft's plain decode speed is measured beside the
  Qwen2.5-0.5B-shaped model's (``--small``), and the cheapest draft that is no
  cheaper than it drafts: tokchat off / draft / auto against llama-server
  without and with ``-md`` (its defaults); the 0.5B-shaped model, which agrees
  with nothing, drafts too, for ``auto``'s back-off and greedy ids under
  rejection on CUDA.

    python bench/gpu_check.py OUT --model MODEL.gguf --server-bin DIR [--rounds 5]
        [--small SMALL.gguf --drafts D8.gguf D12.gguf ...]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import httpx  # noqa: E402

from backends import LoadOptions, SamplingParams, open_backend  # noqa: E402
from backends.base import BackendError  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402

QUESTIONS = ["Write a Python function that parses a CSV file and returns the rows as dictionaries.",
             "What is the capital of France?", "Explain the difference between a list and a tuple."]
N_CTX = 8192


def chat_prompt(tok, question: str) -> list[int]:
    return tok.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", special=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``llama-server`` from the same build, on the model, with its defaults (plus the context size)."""

    def __init__(self, binary: Path, model: Path, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc = subprocess.Popen([str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                                      "-c", str(N_CTX), *extra], stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("llama-server did not answer /health in 120 s")

    def complete(self, prompt: list[int], n: int) -> dict:
        body = {"prompt": prompt, "n_predict": n, "temperature": 0, "repeat_penalty": 1.0, "cache_prompt": False,
                "ignore_eos": True, "return_tokens": True, "samplers": ["top_k"], "top_k": 1}
        return httpx.post(self.url + "/completion", json=body, timeout=600).json()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def local_round(backend, prompt: list[int], n: int) -> tuple[list[int], float, float]:
    """(ids, decode tok/s after the first id, prompt ids/s) of one greedy reply from an empty cache."""
    ids, decode, prompt_rate, _ = counted_round(backend, prompt, n)
    return ids, decode, prompt_rate


def counted_round(backend, prompt: list[int], n: int) -> tuple[list[int], float, float, tuple[int, int] | None]:
    """:func:`local_round` and the reply's (drafted, accepted) ids, None where nothing was drafted."""
    # leave one id in the cache that the prompt does not start with: the whole prompt is then evaluated in
    # one batch, as llama-server evaluates it (a split batch may round differently: a near-tie can flip)
    list(backend.generate([prompt[0] ^ 1], SamplingParams(temperature=0, max_tokens=1), set()))
    sampling = SamplingParams(temperature=0, max_tokens=n, repeat_penalty=1.0)
    started = time.perf_counter()
    first = last = None
    ids = []
    generation = backend.generate(prompt, sampling, set())
    for token in generation:
        now = time.perf_counter()
        first = first or now
        last = now
        ids.append(token)
    assert first is not None and last is not None and len(ids) == n, len(ids)
    evaluated = generation.stats.prompt_evaluated
    counts = generation.stats.draft
    return (ids, (n - 1) / (last - first), evaluated / (first - started),
            (counts.drafted, counts.accepted) if counts else None)


def load(model: Path, log: Path, **options) -> object:
    return open_backend(model, LoadOptions(backend="auto", n_ctx=N_CTX, log_path=log, **options))


def part_ids(args, results: dict) -> None:
    tok = load_tokenizer(args.model)
    backend = load(args.model, args.out / "engine-ids.log", speculative="off")
    server = Server(args.server_bin / "llama-server", args.model, args.out / "server-ids.log")
    try:
        info = backend.info
        results["engine"] = {"device": info.device, "offloaded_layers": info.offloaded_layers,
                             "total_layers": info.total_layers, "vram_mib": info.vram_mib, "notes": info.notes}
        same = []
        for q in QUESTIONS:
            prompt = chat_prompt(tok, q)
            ours, _, _ = local_round(backend, prompt, args.ids)
            theirs = server.complete(prompt, args.ids)["tokens"]
            agree = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            same.append({"question": q, "equal": ours == theirs, "agree_through": agree,
                         "ours": ours[:16], "theirs": theirs[:16]})
        results["ids"] = same
        results["ids_equal"] = all(s["equal"] for s in same)
    finally:
        backend.close()
        server.close()


def part_speed(args, results: dict) -> None:
    tok = load_tokenizer(args.model)
    chat = chat_prompt(tok, QUESTIONS[0])
    filler = tok.encode("The tide was high at dawn and the boats went out. " * 800)
    long_prompt = filler[: args.prompt_ids - len(chat)] + chat
    rows = {}
    for label, spec in (("off", "off"), ("auto", "auto")):
        backend = load(args.model, args.out / f"engine-speed-{label}.log", speculative=spec)
        server = Server(args.server_bin / "llama-server", args.model, args.out / f"server-speed-{label}.log")
        try:
            local_round(backend, chat, 8)
            server.complete(chat, 8)
            ours_d, theirs_d, ours_p, theirs_p = [], [], [], []
            for r in range(args.rounds):
                for who in (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")):
                    if who == "ours":
                        ours_d.append(local_round(backend, chat, args.decode_ids)[1])
                        ours_p.append(local_round(backend, long_prompt, 2)[2])
                    else:
                        theirs_d.append(server.complete(chat, args.decode_ids)["timings"]["predicted_per_second"])
                        theirs_p.append(server.complete(long_prompt, 2)["timings"]["prompt_per_second"])
        finally:
            backend.close()
            server.close()
        rows[label] = {"decode_ours": statistics.median(ours_d), "decode_server": statistics.median(theirs_d),
                       "prompt_ours": statistics.median(ours_p), "prompt_server": statistics.median(theirs_p),
                       "rounds": {"ours_d": ours_d, "server_d": theirs_d, "ours_p": ours_p, "server_p": theirs_p}}
        rows[label]["decode_ratio"] = rows[label]["decode_ours"] / rows[label]["decode_server"]
        rows[label]["prompt_ratio"] = rows[label]["prompt_ours"] / rows[label]["prompt_server"]
    results["speed"] = rows
    results["prompt_ids"] = len(long_prompt)


def part_kill(args, results: dict) -> None:
    tok = load_tokenizer(args.model)
    backend = load(args.model, args.out / "engine-kill.log", speculative="off")
    try:
        first_pid = backend.pid
        got, error = [], ""
        try:
            for token in backend.generate(chat_prompt(tok, QUESTIONS[0]), SamplingParams(temperature=0, max_tokens=2000,
                                                                                         repeat_penalty=1.0), set()):
                got.append(token)
                if len(got) == 5:
                    os.kill(first_pid, signal.SIGKILL)
        except BackendError as exc:
            error = str(exc)
        again = list(backend.generate(chat_prompt(tok, QUESTIONS[1]), SamplingParams(temperature=0, max_tokens=8), set()))
        results["kill"] = {"ids_before_error": len(got), "error": error, "one_line": bool(error) and "\n" not in error,
                           "restarted": backend.pid != first_pid, "ids_after_restart": len(again),
                           "device_after_restart": backend.info.device,
                           "layers_after_restart": backend.info.offloaded_layers}
    finally:
        backend.close()


def part_headless(args, results: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_DATA_HOME=tmp, XDG_CONFIG_HOME=tmp, XDG_STATE_HOME=tmp)
        done = subprocess.run([sys.executable, "-m", "app", "--model", str(args.model), "--prompt", "Say hi",
                               "--max-tokens", "16", "--temperature", "0", "--ctx", "2048", "--stats"],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        doctor = subprocess.run([sys.executable, "-m", "app", "doctor"], capture_output=True, text=True, env=env,
                                cwd=ROOT, timeout=120)
    (args.out / "doctor.txt").write_text(doctor.stdout + doctor.stderr)
    stats_lines = [line for line in done.stderr.splitlines() if line.startswith("{")]
    stats = json.loads(stats_lines[-1]) if stats_lines else {}
    results["headless"] = {"returncode": done.returncode, "stdout": done.stdout[-300:], "stderr": done.stderr[-1500:],
                           "device": stats.get("device"), "gpu_layers": stats.get("gpu_layers"),
                           "vram_mib": stats.get("vram_mib"), "completion_tokens": stats.get("completion_tokens"),
                           "doctor_exit": doctor.returncode}


def part_tui(args, results: dict) -> None:
    from support.tui_helpers import SIZE, send, wait_loaded, wait_reply

    from app.history.store import ChatStore
    from app.settings.options import ChatOptions
    from app.tui.app import ChatApp

    async def drive() -> dict:
        with tempfile.TemporaryDirectory() as tmp, ChatStore(Path(tmp) / "history.sqlite3") as store:
            options = ChatOptions(model=str(args.model), ctx=2048,
                                  sampling=SamplingParams(temperature=0.0, max_tokens=24, repeat_penalty=1.0))
            app = ChatApp(options, store=store)
            async with app.run_test(size=SIZE) as pilot:
                await wait_loaded(pilot)
                bar = str(app.query_one("ModelBar").render())
                await send(pilot, "Hello there")
                await wait_reply(pilot, timeout_s=120)
                app.save_screenshot(str(args.out / "tui.svg"))
                reply = app.session.messages[-1]
                stats = reply.stats
                return {"model_bar": bar, "reply_ids": stats.completion_tokens if stats else 0,
                        "finish": reply.finish_reason, "device": stats.device if stats else "",
                        "gpu_layers": stats.gpu_layers if stats else ""}

    results["tui"] = asyncio.run(drive())


def part_draft(args, results: dict) -> None:
    if not args.small or not args.drafts:
        raise RuntimeError("the draft part needs --small and --drafts")
    tok = load_tokenizer(args.model)
    prompt = chat_prompt(tok, QUESTIONS[0])
    n = args.decode_ids
    report: dict = {"prompt_ids": len(prompt), "reply_ids": n}
    results["draft"] = report
    alone = {}
    for path in (args.model, args.small, *args.drafts):
        backend = load(path, args.out / f"engine-alone-{path.stem}.log", speculative="off")
        try:
            local_round(backend, prompt, 8)
            alone[path.name] = statistics.median(local_round(backend, prompt, n)[1] for _ in range(3))
        finally:
            backend.close()
    report["plain_tok_s"] = alone
    # the cheapest draft that costs a step no less than the real draft model's shape does
    chosen = next((d for d in args.drafts if alone[d.name] <= alone[args.small.name]), args.drafts[-1])
    report["draft"] = chosen.name
    local = {"tokchat off": dict(speculative="off"),
             "tokchat draft": dict(speculative="draft", draft_model=chosen),
             "tokchat auto": dict(speculative="auto", draft_model=chosen),
             "tokchat draft, 0.5B shape": dict(speculative="draft", draft_model=args.small),
             "tokchat auto, 0.5B shape": dict(speculative="auto", draft_model=args.small)}
    remote = {"llama-server none": (),
              "llama-server -md": ("-md", str(chosen), "--spec-type", "draft-simple")}
    engines: dict = {}
    try:
        for i, (name, options) in enumerate(local.items()):
            engines[name] = load(args.model, args.out / f"engine-draft-{i}.log", **options)
        for i, (name, extra) in enumerate(remote.items()):
            engines[name] = Server(args.server_bin / "llama-server", args.model,
                                   args.out / f"server-draft-{i}.log", *extra)
        names = list(engines)
        for name in names:  # warm-up, outside the rounds
            one_reply(engines[name], prompt, 8)
        rows = {name: {"tok_s": [], "counts": [], "ids": None} for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                ids, speed, counts = one_reply(engines[name], prompt, n)
                row = rows[name]
                row["tok_s"].append(speed)
                row["counts"].append(counts)
                row["ids"] = row["ids"] or ids
    finally:
        for engine in engines.values():
            engine.close()
    off = rows["tokchat off"]
    for name, row in rows.items():
        row["median"] = statistics.median(row["tok_s"])
        row["vs_tokchat_off"] = row["median"] / statistics.median(off["tok_s"])
        reference = rows["llama-server none"]["ids"] if name.startswith("llama-server") else off["ids"]
        row["ids_equal"] = row["ids"] == reference
        row["agree_through"] = next((i for i, (a, b) in enumerate(zip(row["ids"], reference)) if a != b),
                                    len(row["ids"]))
    for row in rows.values():
        row["ids"] = row["ids"][:16]
    report["rows"] = rows
    report["tokchat_draft_vs_server_md"] = rows["tokchat draft"]["median"] / rows["llama-server -md"]["median"]
    report["server_offload"] = [line.strip() for i in range(len(remote))
                                for line in (args.out / f"server-draft-{i}.log").read_text().splitlines()
                                if "offloaded" in line]


def one_reply(engine, prompt: list[int], n: int) -> tuple[list[int], float, tuple[int, int] | None]:
    """(ids, decode tok/s, (drafted, accepted)) of one greedy reply from tokchat's engine or llama-server."""
    if isinstance(engine, Server):
        answer = engine.complete(prompt, n)
        timings = answer["timings"]
        counts = (int(timings["draft_n"]), int(timings["draft_n_accepted"])) if "draft_n" in timings else None
        return answer["tokens"], timings["predicted_per_second"], counts
    ids, speed, _, counts = counted_round(engine, prompt, n)
    return ids, speed, counts


#: the GPU memory a hog leaves free when the long prompt starts: 256 MiB was enough for a 7B shape's 2,048-id
#: batches on an H200 (no error); 16 MiB is too little for the CUDA pool's first batch
LEFT_FREE_MIB = 16


def hold_vram(left_mib: int) -> subprocess.Popen:
    """A process holding all of the GPU's free memory but ``left_mib`` (PyTorch, in the GPU image) until
    its stdin closes; returns once it holds it."""
    code = ("import sys, torch; free, _ = torch.cuda.mem_get_info(); "
            f"x = torch.empty(free - {left_mib} * 2**20, dtype=torch.uint8, device='cuda'); "
            "print('held', free // 2**20, flush=True); sys.stdin.read()")
    hog = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = hog.stdout.readline()
    if not line.startswith("held"):
        raise RuntimeError(f"the VRAM hog did not start: {line!r}")
    return hog


def part_oom(args, results: dict) -> None:
    """An out-of-memory on the GPU, forced, is one line: at load (a context whose KV cache cannot fit) from
    the CLI as a user runs it, and mid-prompt (another process takes the memory after the load) in the
    engine, which then starts again and answers once the memory is back."""
    report: dict = {}
    results["oom"] = report
    free_mib = (free_vram_mib() or 0)
    # a context whose f16 KV cache alone is 1.3x the free VRAM
    from backends.model_meta import kv_cache_bytes, read_model_meta
    per_token = kv_cache_bytes(read_model_meta(args.model), 1024) // 1024
    huge_ctx = int(free_mib * 2**20 * 1.3 / per_token) // 1024 * 1024
    report.update(free_mib=free_mib, kv_bytes_per_token=per_token, huge_ctx=huge_ctx)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_DATA_HOME=tmp, XDG_CONFIG_HOME=tmp, XDG_STATE_HOME=tmp)
        for label, extra in (("all layers", ["--gpu-layers", "999"]),):
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "app", "--model", str(args.model), "--prompt", "Say hi",
                                   "--max-tokens", "8", "--temperature", "0", "--ctx", str(huge_ctx), *extra],
                                  capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
            report[f"load, {label}"] = {"returncode": done.returncode, "stderr": done.stderr[-1500:],
                                       "stderr_lines": len(done.stderr.strip().splitlines()),
                                       "stdout": done.stdout[-300:], "seconds": round(time.monotonic() - started, 1)}
    tok = load_tokenizer(args.model)
    filler = tok.encode("The tide was high at dawn and the boats went out. " * 3000)
    long_prompt = filler[:30000] + chat_prompt(tok, QUESTIONS[1])
    backend = open_backend(args.model, LoadOptions(backend="auto", n_ctx=32768, n_gpu_layers=-1,
                                                   log_path=args.out / "engine-oom.log", speculative="off"))
    try:
        report["engine_vram_mib"] = backend.info.vram_mib
        hog = hold_vram(LEFT_FREE_MIB)
        got, error = [], ""
        try:
            try:
                for token in backend.generate(long_prompt, SamplingParams(temperature=0, max_tokens=16), set()):
                    got.append(token)
            except BackendError as exc:
                error = str(exc)
        finally:
            hog.stdin.close()
            hog.wait(60)
        again = list(backend.generate(chat_prompt(tok, QUESTIONS[2]), SamplingParams(temperature=0, max_tokens=8),
                                      set()))
        report["mid_prompt"] = {"prompt_ids": len(long_prompt), "left_free_mib": LEFT_FREE_MIB,
                                "ids_before_error": len(got), "error": error,
                                "one_line": bool(error) and "\n" not in error,
                                "says_memory": "memory" in error, "ids_after": len(again),
                                "layers_after": backend.info.offloaded_layers}
    finally:
        backend.close()


def free_vram_mib() -> int | None:
    from backends.gpu_inventory import read

    free = read().free_vram_per_gpu()  # read now, not this process's kept answer: the memory moves during the check
    return free[0] // 2**20 if free else None


def part_esc(args, results: dict) -> None:
    """The TUI on the GPU: a long prompt draws its progress line, and Esc stops it mid-prompt."""
    import re

    from support.screen_text import drawn, words
    from support.tui_helpers import SIZE, wait_for, wait_loaded, wait_reply

    from app.history.store import ChatStore
    from app.settings.options import ChatOptions
    from app.tui.app import ChatApp
    from app.tui.widgets.assistant_message import AssistantMessage

    async def drive() -> dict:
        with tempfile.TemporaryDirectory() as tmp, ChatStore(Path(tmp) / "history.sqlite3") as store:
            options = ChatOptions(model=str(args.model), ctx=32768,
                                  sampling=SamplingParams(temperature=0.0, max_tokens=16, repeat_penalty=1.0))
            app = ChatApp(options, store=store)
            async with app.run_test(size=SIZE) as pilot:
                await wait_loaded(pilot)
                text = "Summarise these notes. " + " ".join(f"Note {i}: the tide was high at dawn."
                                                           for i in range(2400))
                n_ids = app.session.draft_tokens(text)
                app.prompt_input.text = text
                app.prompt_input.focus()
                await pilot.press("enter")
                seen: list[str] = []

                def shown() -> bool:
                    replies = app.query(AssistantMessage)
                    if not replies:
                        return False
                    found = re.search(r"prompt [\d,]+ / [\d,]+ ids · [\d,]+ ids/s · [\d,]+ s left",
                                      words(drawn(app, replies.last())))
                    if found:
                        seen.append(found.group(0))
                    return found is not None

                await wait_for(pilot, shown, timeout_s=120, what="the prompt's progress line")
                app.save_screenshot(str(args.out / "tui-progress.svg"))
                await pilot.press("escape")
                await wait_reply(pilot, timeout_s=60)
                reply = app.session.messages[-1]
                stats = reply.stats
                shown_after = words(drawn(app, app.query(AssistantMessage).last()))
                return {"message_ids": n_ids, "progress_seen": seen[-3:], "finish": reply.finish_reason,
                        "content": reply.content[:80], "drawn_after": shown_after[-300:],
                        "new_prompt_ids": stats.new_prompt_tokens if stats else None,
                        "prompt_ids": stats.prompt_tokens if stats else None,
                        "device": stats.device if stats else ""}

    results["esc"] = asyncio.run(drive())


PARTS = {"ids": part_ids, "speed": part_speed, "kill": part_kill, "headless": part_headless, "tui": part_tui,
         "draft": part_draft, "oom": part_oom, "esc": part_esc}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--server-bin", type=Path, required=True, help="the build folder with llama-server")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ids", type=int, default=64, help="greedy ids compared per prompt")
    parser.add_argument("--decode-ids", type=int, default=256)
    parser.add_argument("--prompt-ids", type=int, default=4000)
    parser.add_argument("--only", default=",".join(PARTS))
    parser.add_argument("--small", type=Path, help="the draft model's shape with random weights (draft part)")
    parser.add_argument("--drafts", type=Path, nargs="*", default=[],
                        help="the main model's first blocks, cheapest first (draft part)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"model": args.model.name}
    for name in args.only.split(","):
        started = time.monotonic()
        try:
            PARTS[name](args, results)
            results.setdefault("passed_parts", []).append(name)
        except Exception:  # noqa: BLE001 - a failing part is recorded whole and the others still run
            results.setdefault("failures", {})[name] = traceback.format_exc()[-3000:]
        results.setdefault("seconds", {})[name] = round(time.monotonic() - started, 1)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
        print(f"gpu_check: {name} done in {results['seconds'][name]} s", flush=True)
    print(json.dumps({k: v for k, v in results.items() if k not in ("ids",)}, indent=1)[:6000])
    return 0 if not results.get("failures") else 1


if __name__ == "__main__":
    sys.exit(main())
