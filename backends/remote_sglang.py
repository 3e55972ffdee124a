"""SGLang: ``POST /generate`` with ``input_ids`` and ``sampling_params``, streamed.

Read from SGLang's sources: ``python/sglang/srt/sampling/sampling_params.py`` (the
``sampling_params`` fields: ``max_new_tokens`` default 128, ``temperature`` 1.0,
``top_k`` -1 = whole vocabulary, ``min_p``, ``repetition_penalty``, ``stop_token_ids``,
``sampling_seed``) and ``python/sglang/srt/managers/tokenizer_manager_components/
output_processor.py`` (each streamed object is ``{"text", "output_ids", "meta_info"}``;
``output_ids`` is the *whole* reply so far, or only the new ids when the server runs
with ``--incremental-streaming-output``; ``meta_info`` has ``prompt_tokens``,
``completion_tokens``, ``cached_tokens`` and ``finish_reason``
(``{"type": "stop"|"length"|"abort", ...}``)).

Which of the two ``output_ids`` forms a server sends is not announced, so each chunk is
read against ``meta_info.completion_tokens``: a chunk as long as the whole count that
starts with what we already have is cumulative, one that adds up with what we have is
incremental.

Not run here: no SGLang server can run on this machine (no GPU); the tests feed this
adapter the shapes above.
"""
from __future__ import annotations

from typing import Any, Collection, Sequence

from backends.base import SamplingParams
from backends.constraint import server_fields
from backends.remote_protocol import Request, ServerCounts, ServerInfo

_FINISH = {"stop": "stop", "length": "length", "abort": "error"}


class SGLangStream:
    """One turn's ``/generate`` chunks, cumulative or incremental."""

    def __init__(self, prompt_len: int) -> None:
        self.counts = ServerCounts()
        self.unrecovered = 0
        self.ids: list[int] = []
        self._prompt_len = prompt_len
        self._done = False

    def feed(self, event: dict[str, Any]) -> list[int]:
        meta = event.get("meta_info") or {}
        counts = self.counts
        if meta.get("prompt_tokens") is not None:
            counts.prompt_tokens = int(meta["prompt_tokens"])
        if meta.get("cached_tokens") is not None:
            counts.cached_tokens = int(meta["cached_tokens"])
            counts.evaluated_tokens = (counts.prompt_tokens or self._prompt_len) - counts.cached_tokens
        total = meta.get("completion_tokens")
        if total is not None:
            counts.completion_tokens = int(total)
        chunk = [int(t) for t in event.get("output_ids") or []]
        have = len(self.ids)
        if total is not None and len(chunk) == int(total) and chunk[:have] == self.ids:
            new = chunk[have:]  # cumulative: the reply so far
        elif total is not None and have + len(chunk) == int(total):
            new = chunk  # incremental
        elif chunk[:have] == self.ids and len(chunk) >= have:
            new = chunk[have:]  # no count to check against: cumulative if it extends ours
        else:
            new = chunk
        self.ids += new
        reason = meta.get("finish_reason")
        if isinstance(reason, dict) and reason.get("type"):
            self._done = True
            counts.finish = _FINISH.get(str(reason["type"]), "error")
            message = str(reason.get("message") or "").strip().splitlines()
            counts.said = f'finish_reason "{reason["type"]}"' + (f": {message[0][:200]}" if message else "")
        return new

    def finished(self) -> bool:
        return self._done


class SGLangAdapter:
    """SGLang's native API (``/generate``, ``/tokenize``, ``/get_model_info``, ``/get_server_info``)."""

    kind = "sglang"
    #: said once in the stats (issue 45): what the server keeps; tokchat does nothing more
    state_note = "none on disk (SGLang keeps a prefix cache in memory across requests, until it restarts)"

    def __init__(self, model: str | None = None) -> None:
        self.model = model

    def completion(
        self, prompt: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int], seed: int
    ) -> Request:
        params = {
            "max_new_tokens": int(sampling.max_tokens),
            "temperature": max(0.0, sampling.temperature),
            "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,
            "min_p": sampling.min_p,
            "repetition_penalty": sampling.repeat_penalty,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "min_new_tokens": 0,
            "stop_token_ids": sorted(int(t) for t in stop_ids),
            "ignore_eos": False,
            "skip_special_tokens": False,
            "sampling_seed": seed,
            **server_fields(sampling.constraint, self.kind),  # json_schema / regex / ebnf (backends.constraint)
        }
        body = {"input_ids": [int(t) for t in prompt], "sampling_params": params, "stream": True}
        return Request("POST", "/generate", body)

    def parser(self, prompt: Sequence[int]) -> SGLangStream:
        return SGLangStream(len(prompt))

    def tokenize(self, text: str) -> Request:
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        return Request("POST", "/tokenize", body)

    def tokenized_ids(self, body: Any) -> list[int]:
        return [int(t) for t in (body or {}).get("tokens", [])]

    def info_requests(self) -> list[Request]:
        return [Request("GET", "/get_model_info"), Request("GET", "/get_server_info")]

    def server_info(self, url: str, replies: dict[str, Any]) -> ServerInfo:
        model = replies.get("/get_model_info") or {}
        server = replies.get("/get_server_info") or {}
        if not self.model:
            self.model = str(server.get("served_model_name") or model.get("model_path") or "") or None
        return ServerInfo(
            kind=self.kind, url=url, version=str(server.get("version", "")),
            model=str(model.get("model_path") or server.get("model_path") or ""),
            context_size=server.get("context_length") or server.get("max_total_num_tokens"),
        )
