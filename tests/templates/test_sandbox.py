"""Hostile templates fail cleanly: no code runs, no runaway time or memory, one-line errors."""
from __future__ import annotations

import time

import pytest

from templates.sandbox import RenderLimits, SandboxedTemplate, TemplateError

MESSAGES = [{"role": "user", "content": "hi"}]

HOSTILE = {
    "class-walk": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals": "{{ raise_exception.__globals__ }}",
    "attr-filter": "{{ (messages|attr('__class__')).__subclasses__() }}",
    "include-file": "{% include '/etc/passwd' %}",
    "import": "{% import 'os' as os %}{{ os.system('true') }}",
    "nested-loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "loops-over-lists": "{% set l = range(100000)|list %}{% for i in l %}{% for j in l %}{% endfor %}{% endfor %}",
    "multiply": "{{ 'a' * 1000000000 }}",
    "concat-doubling": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "plus-doubling": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "center-filter": "{{ 'a'|center(1000000000) }}",
    "center-method": "{{ 'a'.center(1000000000) }}",
    "format-width": "{{ '{:>999999999}'.format(1) }}",
    "percent-width": "{{ '%999999999d' % 1 }}",
    "set-block": "{% set x %}{% for i in range(100000) %}{{ 'a' * 3000000 }}{% endfor %}{% endset %}",
    "recursion": "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "exponential-macro": "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    "replace-blowup": "{{ ('a' * 1000000)|replace('a', 'bbbbbbbbbbb') }}",
    "join-blowup": "{% set l = ['a' * 1000000] * 1000 %}{{ l|join }}",
    "map-blowup": "{% set l = ['a' * 1000000] * 1000 %}{{ l|map('upper')|list|length }}",
    "power": "{{ 10 ** 100000000 }}",
}


@pytest.mark.parametrize("source", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_template_fails_cleanly(source):
    started = time.monotonic()
    with pytest.raises(TemplateError) as info:
        SandboxedTemplate(source).render(messages=MESSAGES)
    message = str(info.value)
    assert "\n" not in message and message
    # within the time limit plus slack for one slow step (never minutes)
    assert time.monotonic() - started < RenderLimits().time_s * 10


def test_unsafe_attribute_is_named_in_the_error():
    with pytest.raises(TemplateError, match="unsafe"):
        SandboxedTemplate(HOSTILE["class-walk"]).render(messages=MESSAGES)


def test_raise_exception_message_reaches_the_user():
    with pytest.raises(TemplateError, match="refused the conversation: roles must alternate"):
        SandboxedTemplate("{{ raise_exception('roles must alternate') }}").render()


def test_syntax_error_names_the_line():
    with pytest.raises(TemplateError, match="line 2"):
        SandboxedTemplate("ok\n{% for %}")


def test_time_limit_is_configurable():
    source = "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateError, match="longer than 0.05 s|looped too many"):
        SandboxedTemplate(source, RenderLimits(time_s=0.05)).render()


def test_hf_helpers_behave_like_transformers():
    source = ("{{ messages[0].content|tojson }}|{{ {'k': 'é'}|tojson(indent=2) }}|{{ strftime_now('%Y') > '2000' }}"
              "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.role }}{% endfor %}"
              "{% generation %}[gen]{% endgeneration %}")
    messages = [{"role": "user", "content": "naïve <b>"}, {"role": "assistant", "content": "x"}]
    out = SandboxedTemplate(source).render(messages=messages)
    assert out == '"naïve <b>"|{\n  "k": "é"\n}|Trueassistant[gen]'


def test_trim_and_lstrip_blocks_are_on():
    source = "{% for m in messages %}\n    {% if m %}{{ m.content }}{% endif %}\n{% endfor %}"
    assert SandboxedTemplate(source).render(messages=MESSAGES) == "hi"


def test_lists_cannot_be_mutated():
    with pytest.raises(TemplateError, match="unsafe"):
        SandboxedTemplate("{% set _ = messages.append(1) %}").render(messages=[])


def test_moderate_templates_stay_within_limits():
    source = "{% for m in messages %}{{ m.content * 3 }}{{ ','.join([m.role] * 10) }}{% endfor %}"
    messages = [{"role": "user", "content": "x" * 10_000}] * 100
    assert len(SandboxedTemplate(source).render(messages=messages)) == 100 * (30_000 + 49)
