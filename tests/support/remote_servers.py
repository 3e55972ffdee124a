"""Real llama.cpp servers for the remote-backend tests: ``llama-server`` and ``ggml-rpc-server``.

Both binaries are built once from the llama.cpp inside llama-cpp-python's sdist (the
``llama-server`` test asset).  Each server runs on a free loopback port, is waited
for on ``/health`` (as llama.cpp's own server tests do) and is always killed by the
fixture that started it.  Small settings keep them quick: 512-token context, one
slot, one thread and batch 512 like the local llama.cpp backend; flash attention is
left at llama.cpp's default (auto), as the local backend leaves it (so greedy ids can be
compared id for id).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from support.assets import asset_path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def binary(name: str) -> Path:
    return asset_path("llama-server") / name


class LlamaServer:
    """One ``llama-server`` process on loopback."""

    def __init__(self, model: Path, log_dir: Path, *, api_key: str | None = None, ctx: int = 512,
                 rpc: list[str] | None = None, port: int | None = None, extra: tuple[str, ...] = ()) -> None:
        self.model = model
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"llama-server-{self.port}.log"
        self.args = [str(binary("llama-server")), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                     "-c", str(ctx), "-np", "1", "-t", "1", "-tb", "1", "-b", "512", "-ub", "512",
                     "-cram", "0", *extra]
        if api_key:
            self.args += ["--api-key", api_key]
        if rpc:
            self.args += ["--rpc", ",".join(rpc), "-ngl", "99"]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120.0) -> "LlamaServer":
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); log: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"llama-server did not become healthy in {timeout_s} s; log: {self.log}")

    def kill(self) -> None:
        """SIGKILL: the server dies as a crash would leave it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)  # a paused server cannot exit
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def slots(self) -> list[dict]:
        return httpx.get(self.url + "/slots", timeout=5).json()


class RpcWorker:
    """One ``ggml-rpc-server`` (a remote ggml CPU device) on loopback."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = log_dir / f"rpc-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> "RpcWorker":
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([str(binary("ggml-rpc-server")), "-H", "127.0.0.1", "-p", str(self.port),
                                          "-t", "1"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ggml-rpc-server exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("ggml-rpc-server did not listen in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
