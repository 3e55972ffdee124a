"""Messages that blame the wrong thing (issue 34, the remaining items): each names what is really wrong.

Real parts throughout: ``python -m app`` processes with their own folders (:func:`process_env.child_env`),
real files (a fifo, ``/dev/zero``, llama.cpp's vocabulary-only GGUFs, config files written by hand),
real MCP servers as child processes, a real small filesystem (a tmpfs in a mount namespace of its own)
and the real llama.cpp engine for the engine log.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.process_env import child_env

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def tokchat(env: dict[str, str], *args: str, timeout: float = 300, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """One real tokchat process; the timeout only guards against a hang."""
    return subprocess.run([PYTHON, "-m", "app", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def one_line(done: subprocess.CompletedProcess) -> str:
    """The refusal: exit 2, exactly one line on stderr, no traceback, nothing on stdout."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tokchat: ")
    return lines[0]


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# -- 1: a fifo or a device as --model -----------------------------------------------------------------


def test_a_fifo_as_model_says_it_is_a_named_pipe_and_does_not_hang(tmp_path):
    env = child_env(tmp_path)
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    messages = tmp_path / "chat.json"
    messages.write_text('[{"role": "user", "content": "Hi"}]', encoding="utf-8")
    for args in (("-m", str(fifo), "--prompt", "Hi", "--no-history"), ("info", str(fifo)),
                 ("tokenize", "-m", str(fifo), "Hi"), ("render", "-m", str(fifo), "--messages", str(messages))):
        line = one_line(tokchat(env, *args, timeout=60))  # a read of the fifo would block until the timeout
        assert f"{fifo} is a named pipe (fifo), not a GGUF model file" in line, (args, line)
        assert "not found" not in line


def test_a_character_device_as_model_says_what_it_is(tmp_path):
    line = one_line(tokchat(child_env(tmp_path), "-m", "/dev/zero", "--prompt", "Hi", "--no-history", timeout=60))
    assert "/dev/zero is a character device, not a GGUF model file" in line
    assert "not found" not in line


# -- 2: a vocabulary-only GGUF ------------------------------------------------------------------------


def test_a_vocabulary_only_gguf_as_model_says_so_once(llamacpp_models_dir, tmp_path):
    vocab = llamacpp_models_dir / "ggml-vocab-qwen2.gguf"
    line = one_line(tokchat(child_env(tmp_path), "-m", str(vocab), "--prompt", "Hi", "--no-history"))
    assert "holds only a vocabulary (no weights)" in line
    assert "could not load" not in line
    assert line.count("ggml-vocab-qwen2.gguf") == 1, line


def test_info_and_models_mark_a_vocabulary_only_gguf(llamacpp_models_dir, tmp_path):
    env = child_env(tmp_path)
    vocab = llamacpp_models_dir / "ggml-vocab-qwen2.gguf"
    info = tokchat(env, "info", str(vocab))
    assert info.returncode == 0, info.stderr
    assert re.search(r"^tensors +0, vocabulary only \(no weights\)", info.stdout, re.M), info.stdout
    assert json.loads(tokchat(env, "info", str(vocab), "--json").stdout)["weights"]["vocabulary_only"] is True

    models_dir = tmp_path / "models"
    models_dir.mkdir()
    os.symlink(vocab, models_dir / vocab.name)
    listed = tokchat(env, "models", "--dir", str(models_dir))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("vocabulary only"))
    chat_rows = lines[:header]
    assert not any(str(models_dir) in line for line in chat_rows), listed.stdout  # not among the chat models
    assert any(str(models_dir / vocab.name) in line for line in lines[header + 1:]), listed.stdout
    rows = [json.loads(line) for line in tokchat(env, "models", "--dir", str(models_dir), "--json").stdout.splitlines()]
    assert {row["path"]: row["vocabulary_only"] for row in rows}[str(models_dir / vocab.name)] is True
    assert not any(row["vocabulary_only"] for row in rows if row["path"] != str(models_dir / vocab.name))


# -- 3 and 4: config errors name the line, and the known sections are all of them ---------------------------


def test_config_errors_give_the_line(smollm_path, tmp_path):
    from backends.model_meta import read_model_meta

    env = child_env(tmp_path)
    name = read_model_meta(smollm_path).name  # the name /think remembers its choices under
    show = ("config", "show")
    cases = [
        ("""
         [chat]
         stats = true

         [sampling]
         top_k = 40
         temperature = "hot"
         """, 6, "sampling.temperature must be a number, not a string ('hot')", show),
        ("""
         [chat]
         stats = true
         [sampling
         """, 3, "invalid TOML: Expected ']' at the end of a table declaration", show),
        ("""
         # a comment
         sampling.temperature = 0.5
         chat.stat = true
         """, 3, "unknown key chat.stat (did you mean chat.stats?)", show),
        ("""
         [servers.gpu]
         url = "http://127.0.0.1:1"
         kind = "ollama"
         """, 3, "servers.gpu.kind must be one of", show),
        ("""
         [mcp.servers.files]
         command = "x"

         bogus = 1
         """, 4, "mcp.servers.files: unknown key bogus", ("tools",)),
        (f"""
         [models."{name}"]
         thinking = "maybe"
         """, 2, f'models."{name}".thinking must be "on", "off" or "auto"', (*show, "--model", str(smollm_path))),
    ]
    for text, line_number, said, args in cases:
        path = write_config(tmp_path, text)
        line = one_line(tokchat(env, *args, timeout=60))
        assert line.startswith(f"tokchat: {path}, line {line_number}: "), (text, line)
        assert said in line, (text, line)


def test_the_line_of_a_key_is_found_past_strings_that_look_like_keys():
    from app.settings.toml_lines import key_line

    text = textwrap.dedent('''
        [chat]
        system_prompt = """
        temperature = 1
        [sampling]
        """
        "quoted.key" = 1
        [ servers . "gpu box" ]  # a preset
        url = "http://x"
        [sampling]
        tools.enabled = "all"
        temperature = 1
        ''').lstrip("\n")
    assert key_line(text, ("chat", "system_prompt")) == 2
    assert key_line(text, ("sampling", "temperature")) == 11  # not the line inside the multi-line string
    assert key_line(text, ("chat", "quoted.key")) == 6
    assert key_line(text, ("servers", "gpu box")) == 7
    assert key_line(text, ("servers", "gpu box", "url")) == 8
    assert key_line(text, ("sampling", "tools", "enabled")) == 10
    assert key_line(text, ("sampling", "top_k")) is None


def test_an_unknown_section_lists_every_known_one(tmp_path):
    write_config(tmp_path, "[bogus]\nx = 1\n")
    line = one_line(tokchat(child_env(tmp_path), "config", "show", timeout=60))
    known = re.search(r"\(known: (.*)\)$", line).group(1).split(", ")
    assert {"mcp", "models", "servers", "chat", "sampling", "server"} <= set(known), line


# -- 5 and 6: flags that were silently ignored ----------------------------------------------------------


def test_template_and_template_file_together_are_refused(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    line = one_line(tokchat(child_env(tmp_path), "--template", "chatml", "--template-file", str(template),
                            "--prompt", "Hi", "--no-history", timeout=60))
    assert "--template and --template-file" in line and "one of them" in line


def test_system_with_resume_is_refused(tmp_path):
    line = one_line(tokchat(child_env(tmp_path), "--resume", "1", "--system", "Be brief.", "--prompt", "Hi",
                            timeout=60))
    assert "--system" in line and "keeps the system prompt it was stored with" in line
    assert "/system" in line  # how to change it


# -- 7: config show masks the API key -----------------------------------------------------------------


def test_config_show_masks_the_api_key(tmp_path):
    env = child_env(tmp_path)
    secret = "sk-live-0123456789abcdef"
    write_config(tmp_path, f'[server]\napi_key = "{secret}"\n[servers.box]\nurl = "http://127.0.0.1:1"\n'
                           f'api_key = "{secret}"\n')
    for args in (("config", "show"), ("config", "show", "--json"), ("config", "show", "--api-key", secret)):
        done = tokchat(env, *args, timeout=60)
        assert done.returncode == 0, done.stderr
        assert secret not in done.stdout and "0123456789" not in done.stdout, args
        assert "sk-…cdef" in done.stdout, (args, done.stdout)


# -- 8: a malformed server URL --------------------------------------------------------------------------


def test_a_malformed_server_url_says_why(tmp_path):
    env = child_env(tmp_path)
    line = one_line(tokchat(env, "--server", "http://[::1", "--prompt", "Hi", "--no-history", timeout=60))
    assert "'http://[::1' is a malformed URL" in line and "']'" in line
    assert "ports go from" not in line
    port = one_line(tokchat(env, "--server", "http://127.0.0.1:99999", "--prompt", "Hi", "--no-history",
                            timeout=60))
    assert "ports go from 1 to 65535" in port  # a port out of range still says so


# -- 9: a full disk -------------------------------------------------------------------------------------


def _on_a_small_disk(tmp_path: Path, script: str, **variables: str) -> subprocess.CompletedProcess:
    """``script`` (sh) run with ``$DISK`` a 1 MiB tmpfs of its own: mounted in a new user and mount namespace
    (``unshare -rm``, no root needed), so nothing outside the test sees it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    shell = f'set -e; mount -t tmpfs -o size=1m tmpfs "$DISK"\n{script}'
    env = dict(child_env(tmp_path), DISK=str(disk), TOKCHAT_DATA_DIR=str(disk / "data"), PYTHON=PYTHON,
               **variables)
    return subprocess.run(["unshare", "-rm", "sh", "-c", shell], cwd=ROOT, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=600)


#: a recorder writing a conversation while the disk fills up under it (run on the small disk)
RECORDING = textwrap.dedent("""
    import os, subprocess
    from app.conversation.session import ChatMessage
    from app.history.recorder import HistoryRecorder
    from app.history.store import ChatStore

    recorder = HistoryRecorder(notify=print)
    recorder.on_user(ChatMessage("user", "Say hi"))
    print("recorded", recorder.conversation_id)
    subprocess.run(["sh", "-c", 'dd if=/dev/zero of="$DISK/fill" bs=4096 2>/dev/null || true'])
    for n in range(100):  # each message is committed as it comes: the first that does not fit switches it off
        recorder.on_user(ChatMessage("user", "x" * 4000))
        if not recorder.enabled:
            break
    recorder.close()
    with ChatStore(readonly=True) as store:
        print("stored:", store.load(1).messages[0].content)
""")

#: fill the disk, then give back ``$1`` bytes
FILL = ('fill() { dd if=/dev/zero of="$DISK/fill" bs=4096 2>/dev/null || true; '
        'truncate -s "-$1" "$DISK/fill"; }\n')


def test_a_full_disk_says_so_where_and_that_the_conversation_is_kept(smollm_path, tmp_path):
    chat = f'"$PYTHON" -m app -m {smollm_path} --max-tokens 4 --temperature 0'
    done = _on_a_small_disk(tmp_path, FILL + f"""
        {chat} --prompt "Say hi" 2>{tmp_path}/first.err
        fill 0
        {chat} --resume 1 --prompt "Again" 2>{tmp_path}/resumed.err
        rm -rf "$DISK/data" "$DISK/fill"
        fill 16384
        {chat} --prompt "Hi" 2>{tmp_path}/fresh.err
        rm -rf "$DISK/data" "$DISK/fill"
        "$PYTHON" -c "$RECORDING" >{tmp_path}/recording.out
        echo done
    """, RECORDING=RECORDING)
    assert done.returncode == 0 and done.stdout.strip().endswith("done"), done.stderr
    assert "history is off" not in (tmp_path / "first.err").read_text()
    data = tmp_path / "disk" / "data"
    for name in ("resumed", "fresh"):  # a full disk mid-conversation; a new database with 16 KiB left
        said = (tmp_path / f"{name}.err").read_text()
        assert "Traceback" not in said and "disk I/O error" not in said, said  # before: SQLite's IOERR, as is
        line = next(line for line in said.splitlines() if "history is off" in line)
        assert f"history database {data / 'history.sqlite3'}: the disk holding {data} is full (" in line, line
        assert line.endswith("; the history recorded so far is kept"), line
    # a conversation the disk fills under: its messages so far stay
    said = (tmp_path / "recording.out").read_text().splitlines()
    assert said[0] == "recorded 1", said
    assert said[1].startswith(f"history is off for this chat: history database {data / 'history.sqlite3'}: "
                              f"the disk holding {data} is full ("), said
    assert said[1].endswith("; conversation 1 is kept as far as it was recorded"), said
    assert said[2] == "stored: Say hi", said


# -- 10: MCP servers that misbehave -------------------------------------------------------------------------


GARBAGE_SERVER = """
import sys
print("hello, this is not JSON", flush=True)
print('{"also": "not JSON-RPC"}', flush=True)
sys.stdin.readline()
"""

CHATTY_SERVER = """
import sys, time
print("Listening for requests (press Ctrl-C to stop)", flush=True)
time.sleep(120)
"""

SLEEPING_SERVER = """
import time
time.sleep(120)
"""


def test_tools_gives_one_line_per_failed_server_and_fails_when_all_did(tmp_path):
    (tmp_path / "garbage.py").write_text(GARBAGE_SERVER, encoding="utf-8")
    write_config(tmp_path, f"""
        [mcp.servers.garbage]
        command = {json.dumps(PYTHON)}
        args = [{json.dumps(str(tmp_path / "garbage.py"))}]
        [mcp.servers.missing]
        command = "/nonexistent/mcp-server"
        """)
    done = tokchat(child_env(tmp_path), "tools", timeout=120)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "validation error" not in done.stderr, done.stderr
    assert "never retrieved" not in done.stderr, done.stderr
    failed = [line for line in done.stdout.splitlines() if "not available" in line]
    assert len(failed) == 2, done.stdout
    garbage = next(line for line in failed if line.startswith("garbage:"))
    assert "printed something other than JSON-RPC on stdout: 'hello, this is not JSON'" in garbage, garbage
    assert garbage.count("garbage") == 1  # not "garbage: not available: MCP server garbage: ..."
    assert "tokchat: no MCP server started" in done.stderr


def test_a_server_that_prints_text_and_never_answers_is_given_up_after_the_grace(tmp_path):
    """It printed a line that is not JSON-RPC and stays up without answering: the failure names the line
    and says it was given up after the short grace, not after the whole start timeout."""
    from app.tools.mcp_client import STDOUT_FAULT_GRACE_S

    (tmp_path / "chatty.py").write_text(CHATTY_SERVER, encoding="utf-8")
    write_config(tmp_path, f"""
        [mcp.servers.chatty]
        command = {json.dumps(PYTHON)}
        args = [{json.dumps(str(tmp_path / "chatty.py"))}]
        """)
    done = tokchat(child_env(tmp_path), "tools", timeout=120)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("chatty:")]
    assert ("printed something other than JSON-RPC on stdout: 'Listening for requests (press Ctrl-C to stop)' "
            f"and did not answer (gave up after {STDOUT_FAULT_GRACE_S:g} s)") in line, line
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr


def test_a_hanging_mcp_server_leaves_no_asyncio_warning(tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPING_SERVER, encoding="utf-8")
    script = f"""
        import gc
        from app.settings.tools import ServerConfig
        from app.tools.mcp_client import McpHub

        hub = McpHub([ServerConfig(name="sleepy", command={PYTHON!r}, args=({str(tmp_path / 'sleeper.py')!r},))],
                     start_timeout_s=1)
        print(hub.start())
        hub.close()
        del hub
        gc.collect()
        """
    done = subprocess.run([PYTHON, "-c", textwrap.dedent(script)], cwd=ROOT, env=child_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "'sleepy': 'MCP server sleepy: did not start within 1 s'" in done.stdout
    assert done.stderr == "", done.stderr  # before: "Future exception was never retrieved" and its traceback


# -- 11: the engine log is rotated ----------------------------------------------------------------------


def test_the_engine_log_is_rotated_when_it_grows_past_its_limit(smollm_path, tmp_path):
    from backends.engine_log import LOG_LIMIT_BYTES

    env = child_env(tmp_path)
    log = Path(env["XDG_STATE_HOME"]) / "tokchat" / "log" / "engine.log"
    log.parent.mkdir(parents=True)
    old = b"an old line of the engine log\n" * (LOG_LIMIT_BYTES // 30 + 1)
    log.write_bytes(old)
    done = tokchat(env, "-m", str(smollm_path), "--prompt", "Hi", "--max-tokens", "2", "--no-history")
    assert done.returncode == 0, done.stderr
    assert (log.parent / "engine.log.1").read_bytes() == old
    text = log.read_text()
    assert "an old line" not in text and "llama_model_loader" in text and len(text) < LOG_LIMIT_BYTES
