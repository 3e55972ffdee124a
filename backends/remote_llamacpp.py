"""llama.cpp's ``llama-server``: ``POST /completion`` with our prompt ids, streamed.

Read from llama.cpp's own sources (the copy vendored in llama-cpp-python 0.3.36, the
version of our bindings): ``tools/server/README.md`` (the ``/completion``, ``/tokenize``,
``/props`` and ``/v1/models`` fields), ``server-task.cpp`` (``to_json_non_oaicompat`` of
the partial and final results: ``tokens``, ``tokens_predicted``, ``tokens_evaluated``,
``timings.cache_n`` / ``prompt_n`` / ``predicted_per_second``, ``stop_type``) and
``server-context.cpp`` (``process_token``).

* ``prompt`` is a list of ids: the server adds no BOS to it and runs no tokenizer.
* ``cache_prompt`` with ``id_slot`` -1 (:func:`backends.remote_connect.finish_connect`): the server
  takes the idle slot whose cache holds the most of our prompt, where the conversation's KV cache is;
  ``timings.cache_n`` says how much of our prompt it reused, ``prompt_n`` how much it
  evaluated (``timings_per_token`` puts both in the first event already).
* Every sampling field is sent, the ones tokchat does not expose set to "off": the
  server's defaults differ from ours (temperature 0.8, DRY/XTC/mirostat settings).
* ``return_progress``: while the prompt is evaluated the stream carries ``prompt_progress``
  (``total``, ``cache``, ``processed``, ``time_ms``), the server's own count, which the TUI
  shows as it shows the local engine's.
* There is no stop-on-id field; llama-server stops on the vocabulary's end-of-generation
  ids by itself, :mod:`backends.remote` checks our other stop ids and closes the stream.

**Ids held back by the stream.**  ``process_token`` sends nothing for a token that leaves
the generated text ending in an incomplete UTF-8 character; the next token's event
carries the held-back bytes in ``content`` but only its own id in ``tokens``.  Every
event says how many ids the server generated (``tokens_predicted``), so the gap is seen,
and the missing ids are recovered from the bytes: the held-back bytes are split into
exactly that many vocabulary pieces; when only one split exists the ids are exact.
Otherwise (or when the reply ended inside a character, so the bytes never came) the ids
are fetched again without streaming (``return_tokens``) by :mod:`backends.remote`.
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Sequence

from backends.base import DraftCounts, SamplingParams
from backends.constraint import server_fields
from backends.remote_protocol import Request, ServerCounts, ServerInfo

#: llama-server's stop_type -> our finish reason
_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}


def sampling_fields(sampling: SamplingParams, seed: int) -> dict[str, Any]:
    """Every sampler llama-server has, set explicitly (see the module docstring)."""
    return {
        "temperature": max(0.0, sampling.temperature),
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "repeat_penalty": sampling.repeat_penalty,
        "repeat_last_n": sampling.repeat_last_n,  # prompt and reply, as SamplingParams defines it
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "typical_p": 1.0,
        "dynatemp_range": 0.0,
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "mirostat": 0,
        "top_n_sigma": -1.0,
        "seed": seed,
        "ignore_eos": False,
        "n_probs": 0,
    }


class HeldBackIds:
    """Recovers ids from bytes: a vocabulary index from bytes to ids, built on first use."""

    def __init__(self, token_bytes: Callable[[int], bytes], n_vocab: int, is_special: Callable[[int], bool]):
        self._token_bytes = token_bytes
        self._n_vocab = n_vocab
        self._is_special = is_special
        self._by_bytes: dict[bytes, int] | None = None  # piece bytes -> id (normal tokens only)
        self._longest = 0

    def _index(self) -> dict[bytes, int]:
        if self._by_bytes is None:
            index: dict[bytes, int] = {}
            for tid in range(self._n_vocab):
                if self._is_special(tid):
                    continue
                piece = self._token_bytes(tid)
                if piece and piece not in index:
                    index[piece] = tid
            self._by_bytes = index
            self._longest = max((len(p) for p in index), default=0)
        return self._by_bytes

    def piece(self, tid: int) -> bytes:
        return self._token_bytes(tid)

    def splits(self, data: bytes, parts: int, limit: int = 2) -> list[list[int]]:
        """Up to ``limit`` ways to write ``data`` as exactly ``parts`` vocabulary pieces."""
        index = self._index()
        found: list[list[int]] = []

        def walk(start: int, left: int, acc: list[int]) -> None:
            if len(found) >= limit:
                return
            if start == len(data) or left == 0:
                if start == len(data) and left == 0:
                    found.append(list(acc))
                return
            for end in range(start + 1, min(len(data), start + self._longest) + 1):
                tid = index.get(data[start:end])
                if tid is not None:
                    acc.append(tid)
                    walk(end, left - 1, acc)
                    acc.pop()

        walk(0, parts, [])
        return found


class LlamaCppStream:
    """One turn's events from ``/completion``; see the module docstring for held-back ids."""

    def __init__(self, held_back: HeldBackIds | None) -> None:
        self.counts = ServerCounts()
        self.unrecovered = 0
        self.position = 0  # the server's count of generated ids up to the last id it sent
        self._held_back = held_back
        self._done = False

    def feed(self, event: dict[str, Any]) -> list[int]:
        counts = self.counts
        progress = event.get("prompt_progress")
        if isinstance(progress, dict) and "total" in progress:
            # llama-server's own report: processed/total include the reused cache, the timed part excludes it
            cache = int(progress.get("cache", 0))
            counts.progress = (int(progress.get("processed", 0)) - cache, int(progress["total"]) - cache,
                               float(progress.get("time_ms", 0.0)) / 1000.0)
            return []  # a progress event's ``tokens`` is a placeholder ([0]), not a generated id
        if "tokens_evaluated" in event:
            counts.prompt_tokens = int(event["tokens_evaluated"])
        timings = event.get("timings") or {}
        if "cache_n" in timings:
            counts.cached_tokens = int(timings["cache_n"])
        if "prompt_n" in timings:
            counts.evaluated_tokens = int(timings["prompt_n"])
        if timings.get("predicted_per_second"):
            counts.tokens_per_s = float(timings["predicted_per_second"])
        if "draft_n" in timings:  # only a server started with --spec-type or a draft model sends them
            counts.draft = DraftCounts(int(timings["draft_n"]), int(timings.get("draft_n_accepted", 0)))
        ids = [int(t) for t in event.get("tokens") or []]
        predicted = event.get("tokens_predicted")
        if predicted is not None:
            counts.completion_tokens = int(predicted)
            missing = int(predicted) - self.position - len(ids)
            if missing > 0 and ids:
                ids = self._recover(missing, str(event.get("content", "")), ids) + ids
            if ids:
                self.position = int(predicted)
        if event.get("stop"):
            self._done = True
            # the final event's slot and cache size: what backends.remote_slots asks the server to save
            if event.get("id_slot") is not None:
                counts.slot = int(event["id_slot"])
            if event.get("tokens_cached") is not None:
                counts.held = int(event["tokens_cached"])
            counts.finish = _FINISH.get(str(event.get("stop_type", "")), "stop")
            counts.said = f'stop_type "{str(event.get("stop_type", ""))[:100]}"'
        return ids

    def _recover(self, missing: int, content: str, sent: list[int]) -> list[int]:
        """The ``missing`` ids whose bytes lead ``content`` before the sent ids' own bytes."""
        if self._held_back is None:
            self.unrecovered += missing
            return []
        data = content.encode("utf-8")
        tail = b"".join(self._held_back.piece(t) for t in sent)
        if not tail or not data.endswith(tail):
            self.unrecovered += missing
            return []
        options = self._held_back.splits(data[: len(data) - len(tail)], missing)
        if len(options) != 1:
            self.unrecovered += missing
            return options[0] if options else []
        return options[0]

    def finished(self) -> bool:
        return self._done


class LlamaCppAdapter:
    """llama-server's native API (``/completion``, ``/tokenize``, ``/props``, ``/v1/models``)."""

    kind = "llamacpp"
    #: said once where the server cannot save its slots (started without ``--slot-save-path``); where it can,
    #: backends.remote_slots saves and restores them
    state_note = ("none (llama-server keeps nothing between its runs: start it with --slot-save-path DIR "
                  "for tokchat to keep conversations there)")

    def __init__(self, slot: int = -1, held_back: HeldBackIds | None = None) -> None:
        #: the server slot this conversation's cache lives in (-1: the server picks)
        self.slot = slot
        self.held_back = held_back

    def completion(
        self, prompt: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int], seed: int
    ) -> Request:
        body = {
            "prompt": [int(t) for t in prompt],
            "n_predict": int(sampling.max_tokens),
            "stream": True,
            "cache_prompt": True,
            "id_slot": self.slot,
            "timings_per_token": True,
            "return_progress": True,  # prompt_progress events while a long prompt is evaluated
            **sampling_fields(sampling, seed),
            **server_fields(sampling.constraint, self.kind),  # json_schema / grammar (backends.constraint)
        }
        return Request("POST", "/completion", body)

    def recovery(self, prompt: Sequence[int], sampling: SamplingParams, seed: int, n: int) -> Request:
        """The same turn again without streaming, ``n`` ids long: its ``tokens`` are all the ids."""
        body = dict(self.completion(prompt, sampling, (), seed).body or {})
        body.update(stream=False, n_predict=n, timings_per_token=False, return_tokens=True, return_progress=False)
        return Request("POST", "/completion", body)

    @staticmethod
    def recovered_ids(body: Any) -> list[int]:
        return [int(t) for t in (body or {}).get("tokens") or []]

    def parser(self, prompt: Sequence[int]) -> LlamaCppStream:
        return LlamaCppStream(self.held_back)

    def tokenize(self, text: str) -> Request:
        return Request("POST", "/tokenize", {"content": text, "add_special": False, "parse_special": True})

    def tokenized_ids(self, body: Any) -> list[int]:
        return [int(t["id"] if isinstance(t, dict) else t) for t in (body or {}).get("tokens", [])]

    def info_requests(self) -> list[Request]:
        return [Request("GET", "/props"), Request("GET", "/v1/models")]

    def server_info(self, url: str, replies: dict[str, Any]) -> ServerInfo:
        props = replies.get("/props") or {}
        models = (replies.get("/v1/models") or {}).get("data") or [{}]
        meta = models[0].get("meta") or {}
        settings = props.get("default_generation_settings") or {}
        return ServerInfo(
            kind=self.kind, url=url, version=str(props.get("build_info", "")),
            model=str(props.get("model_path") or models[0].get("id") or ""),
            context_size=meta.get("n_ctx") or settings.get("n_ctx"),
            n_vocab=meta.get("n_vocab"), slots=props.get("total_slots"),
            identity=" ".join(f"{k}={meta.get(k)}" for k in ("size", "n_params", "ftype", "n_embd", "n_vocab"))
            + f" build={props.get('build_info', '')}",
        )
