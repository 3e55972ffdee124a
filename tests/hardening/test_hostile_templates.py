"""Hostile chat templates, from a GGUF file and from tokenizer_config.json.

Each template below tries one attack: reach Python internals, read a file,
run a command, loop forever, or build a huge string, integer or structure
(shared references that print as 2**40 leaves).  Through
``resolve_template("auto", ...)`` every one must be refused (sandbox) or cut
off (time/size cap), and a built-in template is used instead with a one-line
notice; the fallback must then render a working prompt.  Headless runs with
the hostile template inside the model file, in a tokenizer folder, or given
as ``--template-file`` show the notice (auto) or a one-line error (explicit).
"""
from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.hardening_limits import address_space_cap
from support.process_env import child_env
from support.gguf_mutate import write_gguf

from app.chat.headless import run_headless
from app.settings.options import ChatOptions
from backends import SamplingParams
from backends.scripted import ScriptedBackend
from templates import prompt_ids, resolve_template
from tokenizer import load_tokenizer
from tokenizer.gguf import read_gguf

PWNED = "/tmp/tokchat-hardening-pwned"
BOMB = "{% set ns = namespace(d=[1]) %}{% for i in range(40) %}{% set ns.d = [ns.d, ns.d] %}{% endfor %}"
DICT_BOMB = ("{% set ns = namespace(d=1) %}{% for i in range(40) %}{% set ns.d = dict(a=ns.d, b=ns.d) %}"
             "{% endfor %}")
HOSTILE = {
    "subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "cycler-globals": f"{{{{ cycler.__init__.__globals__.os.popen('touch {PWNED}').read() }}}}",
    "raise-globals": f"{{{{ raise_exception.__globals__['os'].system('touch {PWNED}') }}}}",
    "strftime-globals": "{{ strftime_now.__globals__ }}",
    "lipsum-globals": "{{ lipsum.__globals__['os'] }}",
    "template-context": "{{ self._TemplateReference__context }}",
    "map-attribute": "{{ messages|map(attribute='__class__')|list }}",
    "attr-filter": "{{ messages|attr('__class__') }}",
    "format-field": "{{ '{0.__class__}'.format(messages) }}",
    "mutate-list": "{% set l = [] %}{{ l.append(1) }}{{ l }}",
    "include-file": "{% include '/etc/passwd' %}",
    "extends-file": "{% extends '/etc/passwd' %}",
    "import-file": "{% import '/etc/hostname' as h %}{{ h }}",
    "range-billion": "{% for i in range(10**9) %}{% endfor %}x",
    "nested-loops": "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
                    "{% endfor %}{% endfor %}{% endfor %}x",
    "recursive-macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "exponential-macro": "{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% else %}x{% endif %}"
                         "{% endmacro %}{{ f(60) }}",
    "string-times": "{{ 'x' * 10**10 }}",
    "string-doubling": "{% set ns = namespace(x='ab') %}{% for i in range(64) %}{% set ns.x = ns.x ~ ns.x %}"
                       "{% endfor %}{{ ns.x }}",
    "percent-width": "{{ '%999999999s' % 'a' }}",
    "center-width": "{{ 'a'|center(10**9) }}",
    "indent-width": "{{ ('x\n' * 1000)|indent(10**6) }}",
    "lipsum-million": "{{ lipsum(10**6) }}",
    "wordwrap-megabytes": "{{ ('x ' * 10**6)|wordwrap(1) }}",
    "int-power-tower": "{% set ns = namespace(x=10) %}{% for i in range(8) %}{% set ns.x = ns.x ** 64 %}"
                       "{% endfor %}{{ ns.x > 5 }}",
    "int-squaring": "{% set ns = namespace(x=10) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
                    "{% endfor %}{{ ns.x > 5 }}",
    "shared-list-output": BOMB + "{{ ns.d }}",
    "shared-list-concat": BOMB + "{{ ('' ~ ns.d)|length }}",
    "shared-list-percent": BOMB + "{{ '%s' % ns.d }}",
    "shared-dict-tojson": DICT_BOMB + "{{ ns.d|tojson|length }}",
    "shared-dict-string": DICT_BOMB + "{{ ns.d|string|length }}",
    "ten-megabyte-source": "x" * 10_000_000,
    "deep-parentheses": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "raise-exception": "{{ raise_exception('no') }}",
    "syntax-error": "{% for message in messages %}",
}
#: templates a single probe can run for seconds; the tokenizer_config.json route checks a sample
CONFIG_SAMPLE = ["subclasses", "include-file", "nested-loops", "shared-dict-tojson", "int-power-tower",
                 "ten-megabyte-source", "lipsum-million"]
#: a render hangs for at most the 1 s deadline plus one uninterruptible call; this only catches a real hang
HANG_GUARD_S = 60


@pytest.fixture(scope="module")
def smollm_items(smollm_path):
    g = read_gguf(smollm_path)
    return [(k, g.types[k], v) for k, v in g.kv.items()]


def _gguf_with_template(items, source: str, path: Path) -> Path:
    path.write_bytes(write_gguf([(k, t, source if k == "tokenizer.chat_template" else v) for k, t, v in items]))
    return path


def _config_with_template(source_dir: Path, tmp_path: Path, source: str) -> Path:
    folder = tmp_path / "tok"
    shutil.copytree(source_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = source
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _falls_back(tokenizer, expected: str) -> str:
    """resolve_template picks ``expected`` with a notice, in bounded time and memory, and it works."""
    started = time.monotonic()
    with address_space_cap(3 << 30):
        template, notice = resolve_template("auto", tokenizer)
    assert time.monotonic() - started < HANG_GUARD_S
    assert template.name == expected
    assert notice.startswith("the model's chat template cannot be used (") and "\n" not in notice
    assert notice.endswith(f"using the built-in {expected} template (the vocabulary has <|im_start|>)")
    rendered = template.render([{"role": "user", "content": "Hello"}])
    ids = prompt_ids(tokenizer, rendered)
    assert tokenizer.decode(ids).count("<|im_start|>") == 2  # the user turn and the generation prompt
    assert not Path(PWNED).exists()
    return notice


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_gguf_template_falls_back(name, smollm_items, tmp_path):
    tokenizer = load_tokenizer(_gguf_with_template(smollm_items, HOSTILE[name], tmp_path / "m.gguf"))
    assert tokenizer.chat_template == HOSTILE[name]
    _falls_back(tokenizer, "chatml")


@pytest.mark.parametrize("name", CONFIG_SAMPLE)
def test_a_hostile_tokenizer_config_template_falls_back(name, qwen_tokenizer_dir, tmp_path):
    tokenizer = load_tokenizer(_config_with_template(qwen_tokenizer_dir, tmp_path, HOSTILE[name]))
    _falls_back(tokenizer, "chatml-think")  # this Qwen vocabulary has <think> as a special token


def test_headless_with_a_hostile_model_template_answers_with_the_built_in(smollm_items, tmp_path):
    model = _gguf_with_template(smollm_items, HOSTILE["cycler-globals"], tmp_path / "m.gguf")
    tok = load_tokenizer(model)
    reply = tok.encode("Fine.") + [tok.special_tokens["<|im_end|>"]]
    backend = ScriptedBackend(lambda ids: reply)
    out, err = io.StringIO(), io.StringIO()
    options = ChatOptions(model=str(model), prompt="hi", ctx=512, sampling=SamplingParams(temperature=0, max_tokens=8))
    assert run_headless(options, backend=backend, out=out, err=err) == 0
    assert out.getvalue() == "Fine.\n"
    (line,) = err.getvalue().splitlines()
    assert line.startswith("tokchat: the model's chat template cannot be used (the template tried something unsafe")
    assert not Path(PWNED).exists()


def test_a_session_on_a_hostile_tokenizer_folder_chats_with_the_built_in(qwen_tokenizer_dir, tmp_path):
    """A tokenizer folder is not a model (headless needs a GGUF), so the session is driven directly."""
    from app.conversation.session import ChatSession

    tok = load_tokenizer(_config_with_template(qwen_tokenizer_dir, tmp_path, HOSTILE["shared-list-output"]))
    template, notice = resolve_template("auto", tok)
    backend = ScriptedBackend(tok.encode("Ok.") + [tok.special_tokens["<|im_end|>"]])
    session = ChatSession(tok, template, backend=backend, context_size=512,
                          sampling=SamplingParams(temperature=0, max_tokens=8))
    events = list(session.send("hi"))
    assert notice.startswith("the model's chat template cannot be used (the template went over a safety limit")
    assert "".join(e.text for e in events if e.kind == "content") == "Ok."
    assert events[-1].stats.finish_reason == "stop"


@pytest.mark.parametrize("name", ["raise-globals", "nested-loops", "shared-list-percent"])
def test_an_explicit_hostile_template_file_is_one_line(name, smollm_path, tmp_path):
    """--template-file is what the user asked for: an error, not a silent fallback (and no model load)."""
    path = tmp_path / "t.jinja"
    path.write_text(HOSTILE[name], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(smollm_path), "--template-file", str(path), "--prompt", "hi"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=child_env(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"tokchat: template file {path} cannot be used: the template ")
    assert not Path(PWNED).exists()


def _with_tensors(original: Path, items, source: str, out: Path) -> Path:
    """A copy of a real model with its chat template replaced, tensors intact (a loadable model)."""
    g = read_gguf(original)
    alignment = g.kv.get("general.alignment", 32)
    with open(original, "rb") as fh:
        data = fh.read()
    off = g.kv_end
    for _ in range(g.tensor_count):  # tensor infos: name, n_dims, dims, type, offset
        (n,) = struct.unpack_from("<Q", data, off)
        off += 8 + n
        (dims,) = struct.unpack_from("<I", data, off)
        off += 4 + 8 * dims + 4 + 8
    infos = data[g.kv_end:off]
    tensor_data = data[-(-off // alignment) * alignment:]
    head = write_gguf([(k, t, source if k == "tokenizer.chat_template" else v) for k, t, v in items],
                      tensor_count=g.tensor_count) + infos
    out.write_bytes(head + bytes(-len(head) % alignment) + tensor_data)
    return out


@pytest.mark.slow
def test_the_real_model_with_a_hostile_template_still_chats(smollm_path, smollm_items, tmp_path):
    model = _with_tensors(smollm_path, smollm_items, HOSTILE["shared-dict-tojson"], tmp_path / "evil.gguf")
    result = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(model), "--prompt", "Say hello.", "--temperature", "0",
         "--max-tokens", "8", "--stats", "--no-history"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=child_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    lines = result.stderr.strip().splitlines()
    assert ("tokchat: the model's chat template cannot be used (the template went over a safety limit: the "
            "template built a value whose text would be over the size limit); using the built-in chatml template "
            "(the vocabulary has <|im_start|>)") in lines, lines
    stats = json.loads(lines[-1])
    assert stats["finish_reason"] in ("stop", "length") and stats["backend"] == "llama.cpp"
