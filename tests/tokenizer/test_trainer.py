"""BPE trainer: determinism, incremental counts, and Hugging Face parity of the saved file.

The corpus is built at test time from the Python standard library that runs
the tests (offline, a few hundred KB); held-out text is other stdlib modules
plus many scripts and whitespace shapes.  Hugging Face ``tokenizers`` is the
oracle for the ids.
"""
from __future__ import annotations

import json
import sysconfig
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from app.cli import main as cli_main
from tokenizer.trainer import (
    BYTE_CHARS,
    PATTERNS,
    PairCounts,
    TrainerConfig,
    count_words,
    pretokenize,
    safe_chunks,
    train_bpe,
)

import regex

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TRAIN_CHARS = 400_000


def _stdlib_files() -> list[Path]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in lib.glob("*.py") if p.stat().st_size > 2000)


@pytest.fixture(scope="session")
def corpus() -> tuple[list[str], list[str]]:
    """(training documents, held-out documents) from the stdlib sources."""
    train, held, size = [], [], 0
    for path in _stdlib_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        if size < TRAIN_CHARS:
            train.append(text)
            size += len(text)
        elif len(held) < 12:
            held.append(text)
    assert size >= TRAIN_CHARS and len(held) == 12
    return train, held


EXTRA_HELD_OUT = [
    "Héllo wörld! Ça va? Straße, naïve café — «quotes» and ‘curly’ don’t it’s",
    "日本語のテキスト、中文文本。한국어 텍스트 ไทย Ελληνικά русский текст עברית العربية हिन्दी",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 keycap 1️⃣",
    "def f(x):\n\treturn x  +  1\n\n\n    \n  \t \r\n\r\nend   ",
    "digits 1234567890 3.14159 1e-10 0xDEADBEEF 2024-06-08",
    "I'm he'll we've they'd SHE'S You'RE 'quoted'",
    "NFD: e\u0301 a\u0308 n\u0303 controls \x00\x01\x1b[31m\x7f zero\u200bwidth nbsp\u00a0x",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|endoftext|><|endoftext|> <|im_end",
    "a" * 3000 + " " + "ab" * 500,
]


@pytest.fixture(scope="session", params=sorted(PATTERNS))
def trained(request, corpus, tmp_path_factory):
    """A vocabulary of 1500 trained on the corpus, saved; one per pattern."""
    config = TrainerConfig(vocab_size=1500, pattern=request.param, special_tokens=SPECIALS)
    model = train_bpe(corpus[0], config)
    directory = tmp_path_factory.mktemp(f"trained-{request.param}")
    model.save(directory)
    return model, directory


def test_training_is_deterministic(corpus, tmp_path):
    config = TrainerConfig(vocab_size=1000, pattern="qwen2", special_tokens=SPECIALS)
    first = train_bpe(corpus[0], config).save(tmp_path / "a")
    second = train_bpe(list(corpus[0]), config).save(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()


def test_vocabulary_shape(trained):
    model, directory = trained
    data = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    assert model.vocab_size == 1500 and not model.stats.stopped_early
    assert len(vocab) == 1500 - len(SPECIALS)
    assert sorted(vocab.values()) == list(range(len(vocab)))
    assert [vocab[BYTE_CHARS[b]] for b in range(256)] == list(range(256))
    for left, right in data["model"]["merges"]:
        assert left in vocab and right in vocab and left + right in vocab
    assert [t["content"] for t in data["added_tokens"]] == list(SPECIALS)
    assert data["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == PATTERNS[model.pattern]


def test_hugging_face_loads_it_and_gives_our_ids(trained, corpus):
    model, directory = trained
    hf = Tokenizer.from_file(str(directory / "tokenizer.json"))
    texts = corpus[1] + EXTRA_HELD_OUT
    matched = sum(hf.encode(t, add_special_tokens=False).ids == model.encode(t) for t in texts)
    assert matched == len(texts), f"{matched}/{len(texts)} held-out texts match HF"
    for special, token_id in model.special_tokens.items():
        assert hf.token_to_id(special) == token_id
    assert hf.get_vocab_size(with_added_tokens=True) == model.vocab_size


def test_tokchat_loads_it_with_hugging_face_ids(trained, corpus):
    """Our own tokenizer.json loader (the app's encode) agrees with HF on the trained file."""
    from tokenizer import load_tokenizer

    model, directory = trained
    hf = Tokenizer.from_file(str(directory / "tokenizer.json"))
    ours = load_tokenizer(directory)
    assert ours.kind == "bpe" and ours.vocab_size == model.vocab_size
    assert ours.special_tokens == model.special_tokens
    texts = corpus[1] + EXTRA_HELD_OUT
    matched = sum(ours.encode(t, special=True) == hf.encode(t, add_special_tokens=False).ids for t in texts)
    assert matched == len(texts), f"{matched}/{len(texts)} held-out texts match HF"
    for text in texts:
        assert ours.decode(ours.encode(text, special=True)) == text


def test_round_trip_and_hf_decode(trained, corpus):
    model, directory = trained
    hf = Tokenizer.from_file(str(directory / "tokenizer.json"))
    for text in corpus[1][:4] + EXTRA_HELD_OUT:
        ids = model.encode(text)
        assert model.decode(ids) == text
        assert hf.decode(ids, skip_special_tokens=False) == text


def test_compression_is_real(trained, corpus):
    """Learned merges are used: held-out code takes far fewer tokens than bytes."""
    model, _ = trained
    text = corpus[1][0]
    assert len(model.encode(text)) < 0.5 * len(text.encode("utf-8"))


def test_special_literals_are_not_learned(corpus):
    config = TrainerConfig(vocab_size=600, special_tokens=("<|endoftext|>",))
    text = ["<|endoftext|>".join(corpus[0][:5]) * 3]
    model = train_bpe(text, config)
    assert not any(b"endoftext" in tb for tb in model.token_bytes)


def test_safe_chunks_do_not_change_pretokens(corpus):
    for pattern in PATTERNS.values():
        compiled = regex.compile(pattern)
        text = "".join(corpus[1][:3])
        chunks = safe_chunks(text, size=500)
        assert len(chunks) > 3 and "".join(chunks) == text
        assert [p for c in chunks for p in pretokenize(c, compiled)] == pretokenize(text, compiled)


def test_training_speed_is_reported(corpus, record_property):
    """Speed sanity, reported, never asserted (timing belongs to benchmarks)."""
    config = TrainerConfig(vocab_size=2000, pattern="qwen2")
    started = time.perf_counter()
    model = train_bpe(corpus[0], config)
    seconds = time.perf_counter() - started
    stats = model.stats
    line = (f"trainer: {stats.corpus_bytes / 1e6:.2f} MB, {stats.merges} merges in {seconds:.2f} s "
            f"(pre-tokenize {stats.pretokenize_s:.2f} s, merges {stats.merge_s:.2f} s, "
            f"{stats.corpus_bytes / 1e6 / seconds:.2f} MB/s)")
    record_property("trainer_speed", line)
    print(line)
    assert stats.merges == 2000 - 256


# -- incremental counting against a naive full recount ----------------------------

def naive_pairs(words: list[list[int]], freqs: list[int]) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for word, freq in zip(words, freqs):
        for pair in zip(word, word[1:]):
            counts[pair] = counts.get(pair, 0) + freq
    return counts


def naive_train(texts: list[str], config: TrainerConfig) -> list[tuple[bytes, bytes]]:
    """Textbook BPE: recount every pair before every merge; same tie-break and id reuse."""
    counts, _ = count_words(texts, config)
    words = [[bytes([b]) for b in piece.encode("utf-8")] for piece in counts]
    freqs = list(counts.values())
    vocab = {bytes([b]) for b in range(256)}
    merges: list[tuple[bytes, bytes]] = []
    while len(vocab) < config.vocab_size - len(config.special_tokens):
        pairs: dict[tuple[bytes, bytes], int] = {}
        for word, freq in zip(words, freqs):
            for pair in zip(word, word[1:]):
                pairs[pair] = pairs.get(pair, 0) + freq
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < config.min_frequency:
            break
        if best not in merges:
            merges.append(best)
        vocab.add(best[0] + best[1])
        for index, word in enumerate(words):
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            words[index] = out
    return merges


small_texts = st.lists(st.text(alphabet="ab c\n'1é", max_size=40), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=12),
       freqs=st.data())
def test_incremental_counts_equal_a_full_recount(words, freqs):
    weights = [freqs.draw(st.integers(1, 5)) for _ in words]
    token_bytes = [bytes([b]) for b in range(256)]
    ids = {tb: i for i, tb in enumerate(token_bytes)}
    state = PairCounts([list(w) for w in words], weights, token_bytes)
    while True:
        expected = naive_pairs(state.words, weights)
        assert state.counts == expected
        best = state.pop_best()
        if best is None:
            assert not expected
            break
        top = min(expected, key=lambda p: (-expected[p], token_bytes[p[0]], token_bytes[p[1]]))
        assert best == (top, expected[top])
        merged = token_bytes[top[0]] + token_bytes[top[1]]
        if merged not in ids:
            ids[merged] = len(token_bytes)
            token_bytes.append(merged)
        state.merge(top, ids[merged])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=small_texts, extra=st.integers(1, 40), min_frequency=st.integers(1, 3),
       pattern=st.sampled_from(sorted(PATTERNS)))
def test_heap_trainer_learns_what_the_naive_trainer_learns(texts, extra, min_frequency, pattern):
    config = TrainerConfig(vocab_size=256 + extra, pattern=pattern, min_frequency=min_frequency)
    model = train_bpe(texts, config)
    learned = [(model.token_bytes[a], model.token_bytes[b]) for a, b in model.merges]
    assert learned == naive_train(texts, config)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=small_texts, probe=st.text(alphabet="ab c\n'1é<|>endoftx", max_size=60),
       pattern=st.sampled_from(sorted(PATTERNS)))
def test_tiny_vocabularies_match_hugging_face(texts, probe, pattern, tmp_path_factory):
    """Small alphabets and min_frequency=1 train down to whole words: HF must still agree."""
    config = TrainerConfig(vocab_size=300, pattern=pattern, special_tokens=("<|endoftext|>",),
                           min_frequency=1)
    model = train_bpe(texts, config)
    directory = tmp_path_factory.mktemp("tiny")
    hf = Tokenizer.from_file(str(model.save(directory)))
    for text in [probe, *texts]:
        assert hf.encode(text, add_special_tokens=False).ids == model.encode(text)
        assert model.decode(model.encode(text)) == text


# -- the command line ---------------------------------------------------------------

def test_cli_trains_and_writes_a_loadable_file(corpus, tmp_path, capsys):
    source = tmp_path / "corpus.txt"
    source.write_text("".join(corpus[0][:10]), encoding="utf-8")
    out = tmp_path / "tok"
    code = cli_main(["tokenizer", "train", "--corpus", str(source), "--vocab-size", "700",
                     "--output", str(out), "--pattern", "gpt2", "--special", "<|endoftext|>", "--quiet"])
    assert code == 0
    assert "700 tokens" in capsys.readouterr().out
    hf = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert hf.get_vocab_size(with_added_tokens=True) == 700
    assert hf.token_to_id("<|endoftext|>") == 699


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (None, ["--vocab-size", "100"], "leaves no room for merges"),
        ("binary", ["--vocab-size", "400"], "is not UTF-8 text (bad byte at offset 3)"),
        ("missing", ["--vocab-size", "400"], "corpus file not found"),
        ("existing", ["--vocab-size", "400"], "already exists; pass --force"),
        (None, ["--vocab-size", "400", "--special", "x", "x"], "distinct"),
    ],
)
def test_cli_errors_are_one_line_and_lose_nothing(tmp_path, capsys, setup, args, message):
    source = tmp_path / "corpus.txt"
    source.write_text("some words, some more words\n" * 50, encoding="utf-8")
    out = tmp_path / "tok"
    if setup == "binary":
        source.write_bytes(b"abc\xff\xfe")
    elif setup == "missing":
        source = tmp_path / "nope.txt"
    elif setup == "existing":
        out.mkdir()
        (out / "tokenizer.json").write_text("precious", encoding="utf-8")
    code = cli_main(["tokenizer", "train", "--corpus", str(source), "--output", str(out), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    if setup == "existing":
        assert (out / "tokenizer.json").read_text(encoding="utf-8") == "precious"
    else:
        assert not (out / "tokenizer.json").exists()
