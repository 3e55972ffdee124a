"""vLLM (and OpenAI-compatible servers that take token-id prompts): ``POST /v1/completions``.

Read from vLLM's sources: ``vllm/entrypoints/openai/completion/protocol.py``
(``CompletionRequest``: ``prompt`` as ``list[int]``, ``stop_token_ids``,
``return_token_ids``, ``stream_options``, the sampling fields and their defaults;
``CompletionResponseStreamChoice``: ``token_ids`` holds each chunk's *new* ids,
``finish_reason``, ``stop_reason``), ``vllm/entrypoints/serve/engine/protocol.py``
(``UsageInfo`` with ``prompt_tokens_details.cached_tokens``, filled only when the server
runs with ``--enable-prompt-tokens-details``) and ``StreamOptions``
(``include_usage``, ``continuous_usage_stats``: usage on every chunk).

* vLLM's defaults are not ours (``max_tokens`` 16, temperature 1.0, no top-k): every
  field is sent.  ``repetition_penalty`` is vLLM's multiplicative penalty over prompt and
  output (llama.cpp's ``repeat_penalty`` looks at the last 64 ids only).
* ``stop_token_ids`` carries our stop ids, so vLLM stops on them itself; the stop id is
  part of ``token_ids`` (vLLM appends the sampled id before its stop check).
* ``skip_special_tokens: false`` keeps the text faithful; tokchat reads only the ids.

Not run here: no vLLM server can run on this machine (no GPU); the tests feed this
adapter the chunk shapes above.
"""
from __future__ import annotations

from typing import Any, Collection, Sequence

from backends.base import SamplingParams
from backends.constraint import server_fields
from backends.remote_protocol import Request, ServerCounts, ServerInfo


class VLLMStream:
    """One turn's ``text_completion`` chunks."""

    def __init__(self) -> None:
        self.counts = ServerCounts()
        self.unrecovered = 0
        self._done = False

    def feed(self, event: dict[str, Any]) -> list[int]:
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.counts.prompt_tokens = usage.get("prompt_tokens", self.counts.prompt_tokens)
            if usage.get("completion_tokens") is not None:
                self.counts.completion_tokens = int(usage["completion_tokens"])
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                self.counts.cached_tokens = int(details["cached_tokens"])
                if self.counts.prompt_tokens is not None:
                    self.counts.evaluated_tokens = int(self.counts.prompt_tokens) - self.counts.cached_tokens
        ids: list[int] = []
        for choice in event.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            ids += [int(t) for t in choice.get("token_ids") or []]
            reason = choice.get("finish_reason")
            if reason:
                self._done = True
                self.counts.finish = "length" if reason == "length" else "stop" if reason == "stop" else "error"
                self.counts.said = f'finish_reason "{str(reason)[:100]}"'
        return ids

    def finished(self) -> bool:
        return self._done


class VLLMAdapter:
    """vLLM's OpenAI-compatible server (``/v1/completions``, ``/tokenize``, ``/v1/models``, ``/version``)."""

    kind = "vllm"
    #: said once in the stats (issue 45): what the server keeps; tokchat does nothing more
    state_note = "none on disk (vLLM keeps a prefix cache in memory across requests, until it restarts)"

    def __init__(self, model: str | None = None) -> None:
        #: the served model name (from ``/v1/models``); vLLM checks it when given
        self.model = model

    def completion(
        self, prompt: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int], seed: int
    ) -> Request:
        body: dict[str, Any] = {
            "prompt": [int(t) for t in prompt],
            "max_tokens": int(sampling.max_tokens),
            "temperature": max(0.0, sampling.temperature),
            "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,
            "min_p": sampling.min_p,
            "repetition_penalty": sampling.repeat_penalty,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "seed": seed,
            "n": 1,
            "stop": [],
            "stop_token_ids": sorted(int(t) for t in stop_ids),
            "ignore_eos": False,
            "min_tokens": 0,
            "skip_special_tokens": False,
            "add_special_tokens": False,
            "echo": False,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "return_token_ids": True,
            **server_fields(sampling.constraint, self.kind),  # structured_outputs (backends.constraint)
        }
        if self.model:
            body["model"] = self.model
        return Request("POST", "/v1/completions", body)

    def parser(self, prompt: Sequence[int]) -> VLLMStream:
        return VLLMStream()

    def tokenize(self, text: str) -> Request:
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        return Request("POST", "/tokenize", body)

    def tokenized_ids(self, body: Any) -> list[int]:
        return [int(t) for t in (body or {}).get("tokens", [])]

    def info_requests(self) -> list[Request]:
        return [Request("GET", "/v1/models"), Request("GET", "/version")]

    def server_info(self, url: str, replies: dict[str, Any]) -> ServerInfo:
        models = (replies.get("/v1/models") or {}).get("data") or [{}]
        first = models[0]
        if first.get("id") and not self.model:
            self.model = str(first["id"])
        return ServerInfo(
            kind=self.kind, url=url, version=str((replies.get("/version") or {}).get("version", "")),
            model=str(first.get("root") or first.get("id") or ""),
            context_size=first.get("max_model_len"),
        )
