"""The engine pipe's messages: every one survives its line, and a line that is not one is refused by name."""
from __future__ import annotations

import io
import threading

import pytest

from backends.engine_wire import (
    Cancel, Close, Done, Failed, Generate, Ids, LineWriter, Load, Loaded, LoadFailed, Progress, WireError, decode,
    encode,
)

MESSAGES = [
    Load("llama.cpp", "CUDA", "/m.gguf", {"n_ctx": 2048, "log_path": "/l.log", "draft_model": None}, {"a": 1}),
    Load("mlx", "CPU", "/dir", {}),
    Generate(3, [1, 2, 3], {"temperature": 0.0, "max_tokens": 8}, [2]),
    Cancel(3), Close(), Loaded({"backend": "llama.cpp", "device": "CUDA", "offloaded_layers": 29}),
    LoadFailed("llama.cpp could not load m.gguf"), Progress(3, 256, 4000), Ids(3, [42], 17, (8, 5)),
    Ids(3, [42], 17), Done(3, 17, (8, 5)), Done(4, 0), Failed(3, "no model loaded"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_is_one_line_and_comes_back_equal(message):
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line) == message


@pytest.mark.parametrize("line", [b"hello\n", b'{"ids": [1]}\n', b'{"type": "Shutdown"}\n',
                                  b'{"type": "Cancel", "job": 1, "why": "x"}\n', b'{"type": "Cancel"}\n',
                                  b"[1, 2]\n"])
def test_a_line_that_is_no_message_is_refused(line):
    with pytest.raises(WireError):
        decode(line)


def test_two_threads_writing_never_interleave_a_line():
    stream = io.BytesIO()
    writer = LineWriter(stream)
    message = Ids(1, list(range(200)), 5, (1, 1))

    def write() -> None:
        for _ in range(200):
            writer.send(message)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = stream.getvalue().splitlines(keepends=True)
    assert len(lines) == 800 and all(decode(line) == message for line in lines)
