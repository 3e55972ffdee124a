"""Constrained replies (issue 46): llguidance over tokchat's own vocabulary, masked in llama.cpp's sampling.

The engine is the real llama.cpp in its own process (:class:`backends.engine_client.HostedBackend`) on
Qwen2.5-Coder-0.5B, so the constraint crosses the engine pipe as data and is compiled there; every
reply is checked afterwards with the ``jsonschema`` package, which knows nothing of the engine.  The
unconstrained reply to the same prompt is the control: it does not match the schema, so a mask that
did nothing would fail these tests.
"""
from __future__ import annotations

import json

import pytest

from backends.base import LoadOptions, OutputConstraint, SamplingParams
from backends.constraint import (
    MAX_SOURCE_BYTES, ConstraintError, GrammarVocabulary, check_reply, describe, parse_constraint,
)
from backends.engine_client import HostedBackend
from tokenizer import load_tokenizer

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "languages": {"type": "array", "items": {"enum": ["python", "rust", "go"]}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}
ASK = "Describe a fictional programmer: name, age, what they like to do on weekends."


def chat(tokenizer, question: str) -> list[int]:
    return tokenizer.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", special=True)


# -- what the user gives, refused in one line before any engine work -------------------------------------------

BAD = [
    ("json_schema", "{not json", "is not JSON"),
    ("json_schema", '{"type": "nope"}', "not valid at type"),
    ("json_schema", '[1, 2]', "is an object"),
    ("json_schema", '{"not": {"type": "string"}}', 'Unimplemented keys: ["not"]'),
    ("json_schema", '{"type": "string", "pattern": "(?=a)b"}', "look-around"),
    ("json_schema", '{"$ref": "#/definitions/missing"}', "does not exist"),
    ("json_schema", '{"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/b"}, '
                    '"b": {"anyOf": [{"$ref": "#/definitions/a"}]}}}', "$ref loops"),
    ("regex", "", "regex is empty"),
    ("regex", "[a-", "unclosed character class"),
    ("grammar", "start: foo\nfoo: (", "grammar cannot be used"),
    ("grammar", "root ::= foo", "Rule 'foo' not found"),
    ("grammar", "   \n", "grammar is empty"),
]


@pytest.mark.parametrize("kind,source,says", BAD, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(BAD)])
def test_a_bad_constraint_is_one_line_naming_what_is_wrong(kind, source, says):
    with pytest.raises(ConstraintError) as refused:
        parse_constraint(kind, source)
    message = str(refused.value)
    assert says in message
    assert "\n" not in message and len(message) < 400


def test_a_ten_megabyte_schema_is_refused_by_its_size_before_it_is_parsed():
    huge = '{"enum": [' + ",".join(['"' + "x" * 100 + '"'] * 102_000) + "]}"
    assert len(huge) > 10 * MAX_SOURCE_BYTES
    with pytest.raises(ConstraintError, match=r"the JSON Schema is 10\.\d MB: the most accepted is 1 MB"):
        parse_constraint("json_schema", huge)


def test_a_recursive_schema_that_nests_is_accepted():
    tree = {"type": "object", "properties": {"value": {"type": "integer"},
                                            "children": {"type": "array", "items": {"$ref": "#"}}}}
    assert parse_constraint("json_schema", json.dumps(tree)).kind == "json_schema"


def test_good_constraints_of_every_kind_parse_and_describe_themselves():
    assert describe(parse_constraint("json")) == "json"
    assert describe(parse_constraint("json_schema", json.dumps(PERSON))) == "json schema"
    assert describe(parse_constraint("regex", r"\d{3}-\d{4}")) == r"regex /\d{3}-\d{4}/"
    assert describe(parse_constraint("grammar", 'root ::= "yes" | "no"')) == "grammar (gbnf)"
    assert describe(parse_constraint("grammar", 'start: "yes" | "no"')) == "grammar (lark)"


def test_check_reply_uses_jsonschema_and_says_where_a_reply_fails():
    person = OutputConstraint("json_schema", json.dumps(PERSON))
    assert check_reply(person, '{"name": "Ada", "age": 36, "languages": ["rust"]}') is None
    assert "at age" in check_reply(person, '{"name": "Ada", "age": 360, "languages": ["rust"]}')
    assert "not JSON" in check_reply(person, '{"name": "Ada", "age"')
    assert "does not match the regex" in check_reply(OutputConstraint("regex", r"\d+"), "12a")


# -- the mask over the real vocabulary --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen_tokenizer(qwen_path):
    return load_tokenizer(qwen_path)


@pytest.fixture(scope="module")
def qwen_vocab(qwen_tokenizer):
    return GrammarVocabulary(qwen_tokenizer, qwen_tokenizer.eog_ids)


def test_the_mask_allows_only_ids_whose_bytes_continue_the_match(qwen_tokenizer, qwen_vocab):
    reply = qwen_vocab.start(parse_constraint("regex", r"(yes|no)"))
    allowed = reply.allowed()
    texts = {qwen_tokenizer.token_bytes(int(t)) for t in allowed.nonzero()[0]}
    assert texts and all(b"yes".startswith(t) or b"no".startswith(t) for t in texts)
    assert b"yes" in texts and b"no" in texts
    for token in qwen_tokenizer.encode("yes"):
        reply.advance(token)
    assert reply.complete
    # once matched, only the ends of a reply remain
    assert set(reply.allowed().nonzero()[0].tolist()) <= set(qwen_tokenizer.eog_ids)


def test_a_draft_is_cut_at_its_first_refused_id(qwen_tokenizer, qwen_vocab):
    reply = qwen_vocab.start(parse_constraint("json_schema", json.dumps(PERSON)))
    good = qwen_tokenizer.encode('{"name": "Ada", "age": 36')
    assert reply.cut_draft(good) == good
    bad = qwen_tokenizer.encode('{"name": "Ada", "height": 36')
    kept = reply.cut_draft(bad)
    assert kept == bad[:len(kept)] and 0 < len(kept) < len(bad)
    assert qwen_tokenizer.decode(kept).startswith('{"name": "Ada", "')


# -- the real engine, in its own process -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hosted(qwen_path, tmp_path_factory):
    backend = HostedBackend("llama.cpp")
    backend.load(qwen_path, LoadOptions(n_ctx=2048, speculative="off",
                                        log_path=tmp_path_factory.mktemp("engine") / "engine.log"))
    yield backend
    backend.close()


def _reply(backend, tokenizer, sampling: SamplingParams, question: str = ASK):
    generation = backend.generate(chat(tokenizer, question), sampling, tokenizer.eog_ids)
    ids = list(generation)
    text = tokenizer.decode([t for t in ids if t not in tokenizer.eog_ids])
    return text, generation.stats


@pytest.mark.slow
def test_a_greedy_constrained_reply_validates_where_the_free_one_does_not(hosted, qwen_tokenizer):
    greedy = SamplingParams(temperature=0, max_tokens=96)
    free, _ = _reply(hosted, qwen_tokenizer, greedy)
    person = parse_constraint("json_schema", json.dumps(PERSON))
    assert check_reply(person, free) is not None  # the control: the model alone does not answer in this shape
    text, stats = _reply(hosted, qwen_tokenizer, SamplingParams(temperature=0, max_tokens=96, constraint=person))
    assert stats.finish_reason == "stop"
    assert check_reply(person, text) is None, text
    assert stats.mask_ms > 0
    again, _ = _reply(hosted, qwen_tokenizer, SamplingParams(temperature=0, max_tokens=96, constraint=person))
    assert again == text  # greedy and constrained: the same reply every time


@pytest.mark.slow
def test_a_sampled_constrained_reply_validates_too(hosted, qwen_tokenizer):
    person = parse_constraint("json_schema", json.dumps(PERSON))
    for seed in (1, 2):
        text, stats = _reply(hosted, qwen_tokenizer,
                             SamplingParams(temperature=1.0, seed=seed, max_tokens=120, constraint=person))
        assert stats.finish_reason == "stop" and check_reply(person, text) is None, text


@pytest.mark.slow
def test_a_reply_cut_by_max_tokens_inside_the_value_ends_with_length(hosted, qwen_tokenizer):
    person = parse_constraint("json_schema", json.dumps(PERSON))
    text, stats = _reply(hosted, qwen_tokenizer, SamplingParams(temperature=0, max_tokens=6, constraint=person))
    assert stats.finish_reason == "length"
    assert check_reply(person, text) is not None  # a cut object: incomplete, never passed as valid


@pytest.mark.slow
def test_a_regex_and_a_gbnf_grammar_hold_the_reply(hosted, qwen_tokenizer):
    date = parse_constraint("regex", r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]")
    text, stats = _reply(hosted, qwen_tokenizer, SamplingParams(temperature=0, max_tokens=24, constraint=date),
                         "When was Python 3.0 released?")
    assert stats.finish_reason == "stop" and check_reply(date, text) is None, text
    answer = parse_constraint("grammar", 'root ::= ("yes" | "no") "."')
    text, stats = _reply(hosted, qwen_tokenizer, SamplingParams(temperature=0, max_tokens=8, constraint=answer),
                         "Is Python a programming language? Answer in a paragraph.")
    assert stats.finish_reason == "stop" and text in ("yes.", "no."), text


@pytest.mark.slow
def test_speculative_drafts_are_cut_to_what_the_schema_allows(qwen_path, qwen_tokenizer, tmp_path):
    """A copy-heavy request: the n-gram drafter proposes the prompt's JSON, whose extra field the schema
    refuses; the reply still validates and is the one the engine gives without speculation."""
    record = {"name": "Ada Lovelace", "age": 36, "languages": ["python", "rust"], "city": "London"}
    # one field a line, the layout the model writes under the schema's grammar: the drafts match its ids
    question = ("Copy this JSON record exactly, every field as it is:\n" + json.dumps(record, indent=0) + "\n" +
                json.dumps(record, indent=0))
    person = parse_constraint("json_schema", json.dumps(PERSON))
    replies = {}
    for mode in ("off", "ngram"):
        backend = HostedBackend("llama.cpp")
        backend.load(qwen_path, LoadOptions(n_ctx=2048, speculative=mode, log_path=tmp_path / f"{mode}.log"))
        try:
            replies[mode] = _reply(backend, qwen_tokenizer,
                                   SamplingParams(temperature=0, max_tokens=80, constraint=person), question)
        finally:
            backend.close()
    text, stats = replies["ngram"]
    assert check_reply(person, text) is None, text
    assert stats.draft is not None and stats.draft.accepted > 0  # drafts were taken, cut where they left the schema
    assert "city" not in text
    assert text == replies["off"][0]


def test_a_control_token_is_never_spelled_out_inside_a_value(qwen_tokenizer, qwen_vocab):
    """Inside a JSON string any text goes, but ``<|im_start|>`` is one control id, not text: refused."""
    reply = qwen_vocab.start(parse_constraint("json_schema", '{"type": "string"}'))
    reply.advance(qwen_tokenizer.encode('"')[0])
    allowed = reply.allowed()
    im_start = qwen_tokenizer.encode("<|im_start|>", special=True)
    assert len(im_start) == 1 and not allowed[im_start[0]]
    assert allowed[qwen_tokenizer.encode("<")[0]]
