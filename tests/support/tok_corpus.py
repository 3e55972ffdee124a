"""The parity corpus: text that has broken tokenizers before.

Built in code (no data files): many scripts, emoji ZWJ sequences and flags,
code with tabs, whitespace and newline runs, digit runs, contractions (also
with ’), NFD text, control characters, special-token literals inside
ordinary text, very long words.  The oracles' ids are computed at test time.
"""
from __future__ import annotations

import base64
import random
import unicodedata

SCRIPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Grüße aus Köln – Straße, Maß und Fuß. ÄÖÜ äöü ß ẞ",
    "Ça va? L'œuvre d'été à Noël, où êtes-vous?",
    "¿Dónde está la biblioteca? ¡Olé! Niño, año, pingüino.",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε· ελληνικά με τόνους: άέήίόύώ ΐΰ",
    "مرحبا بالعالم! هذا نص عربي مع أرقام ١٢٣٤٥ وتشكيل: مُحَمَّد",
    "שלום עולם! זה טקסט בעברית עם ניקוד: בְּרֵאשִׁית",
    "नमस्ते दुनिया! यह हिन्दी पाठ है। क्षत्रिय, श्री, ज्ञान",
    "ওহে বিশ্ব! বাংলা লেখা। তামিল: வணக்கம் உலகம்",
    "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "你好，世界！这是一段中文文本，包含标点符号。繁體字：臺灣",
    "こんにちは世界！ひらがな、カタカナ、漢字を混ぜた日本語の文章です。ｶﾀｶﾅ半角",
    "안녕하세요 세계! 한국어 문장입니다. 한글 자모: ㄱㄴㄷ",
    "Xin chào thế giới! Tiếng Việt có dấu: ặ ẫ ỡ ự",
    "გამარჯობა მსოფლიო! Բարեւ աշխարհ! ሰላም ዓለም!",
    "İstanbul'da ılık bir gün; Zażółć gęślą jaźń.",
    "Ελληνικά, русский, العربية, हिन्दी, 中文, 日本語 and English in one line.",
]
EMOJI = [
    "Family: 👨‍👩‍👧‍👦 couple: 👩‍❤️‍💋‍👨 tones: 👍🏻👍🏽👍🏿",
    "Flags: 🇯🇵🇺🇸🇩🇪🇧🇷 🏳️‍🌈 🏴‍☠️ keycaps: 1️⃣ #️⃣ *️⃣",
    "Mixed😀text😀without😀spaces 🚀🔥💯 ❤️ ♥ ☺️",
    "🧑🏾‍💻 writes 🐍 code; 🤷‍♀️🤦🏼‍♂️",
]
CODE = [
    "def fib(n):\n\tif n < 2:\n\t\treturn n\n\treturn fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) {\n    printf(\"%d\\n\", i);\n}\n",
    "const x = {a: 1, b: [2, 3], 'c': \"d\"};  // comment\nconsole.log(x?.a ?? 0);",
    '{"name": "tokchat", "version": "0.1.0", "tags": ["llm", "tui"], "n": 42}',
    "<div class=\"box\"><p>Hello &amp; welcome</p><br/></div>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "cat file.txt | grep -E '^[a-z]+$' | sort -u > out.txt && echo done",
    "    indented\n        more indented\n\t\ttabs\n  \t mixed \t ",
    "x=1;y=2;z=x+y*3**2//4%5-6&7|8^9~0<<1>>2",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\nprint(arr.shape)  # (3, 4)\n",
]
WHITESPACE = [
    "", " ", "  ", "   ", "\n", "\n\n", "\n\n\n\n", "\r\n", "\r\n\r\n", "\t", "\t\t\t",
    " \n \n ", "word  word   word    word", "trailing   ", "   leading", "a \n\n  b",
    "\u00a0nbsp\u00a0 \u3000ideographic\u3000 \u2003em\u2003space", "line\u2028sep\u2029para",
    "x\x0by\x0cz", "\n \t\n", "   \n\n   \n", "end\n",
]
DIGITS = [
    "1", "12", "123", "1234", "12345", "1234567", "12345678901234567890",
    "3.14159 2.71828 1e-10 -42 +7", "1,000,000 and 1.000.000", "2024-01-15T12:34:56Z",
    "Arabic-Indic ١٢٣٤٥٦ Devanagari १२३४ fullwidth １２３ circled ① superscript ²³ roman Ⅻ fraction ½",
    "phone +1 (555) 123-4567, ip 192.168.0.1, v1.2.3",
    "0x1F 0b1010 0o777 1_000_000",
]
CONTRACTIONS = [
    "I'm sure you're right, it's fine; we'll see, they've gone, I'd go, she's here.",
    "DON'T SHOUT, WE'LL HEAR YOU'RE THERE. I'M OK. IT'S 'S 'T 'RE 'VE 'M 'LL 'D",
    "It’s curly: don’t, we’ll, they’ve, I’m ’s ’t",
    "rock'n'roll 'quoted' ''double'' o'clock y'all ma'am",
    "long s: it'ſ, IT'ſ 'ſt; Kelvin 'K",
]
NFD = [
    unicodedata.normalize("NFD", "café résumé naïve Ångström über"),
    unicodedata.normalize("NFD", "한국어 텍스트"),
    "e\u0301 a\u0300 o\u0302 n\u0303 combining stacked: a\u0301\u0302\u0303\u0304",
    "Z\u0351\u0352\u0353\u0354a\u0355\u0356\u0357l\u0358\u0359g\u035a\u035bo",
]
CONTROL = [
    "null\x00byte", "\x01\x02\x03\x04 ctrl", "ansi \x1b[31mred\x1b[0m", "del\x7fchar",
    "zero\u200bwidth\u200djoiner\ufeffbom", "bidi \u202eevil\u202c text", "bell\a and back\bspace",
    "\x1c\x1d\x1e\x1f info separators", "\u0085next line", "soft\u00adhyphen",
]
SPECIAL_LITERALS = [
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "text <|endoftext|> more text<|endoftext|>",
    "<s> bos and </s> eos and <unk> unk",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<|user|>\nQuestion<|end|>\n<|assistant|>",
    "[INST] instruction [/INST] <<SYS>>",
    "almost<|im_end |>special <|im_startx|> <|im_end|><|im_end|>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>hello<|END_OF_TURN_TOKEN|>",
    "<unused0> <unused99> <start_of_image> <pad> <mask>",
    "spaces around   <|im_end|>   special\n<|im_end|>\n",
]
LONG = [
    "a" * 1000,
    "supercalifragilisticexpialidocious" * 30,
    "Pneumonoultramicroscopicsilicovolcanoconiosis and antidisestablishmentarianism",
    "https://example.com/a/very/long/path/with-many-segments_and_underscores?query=value&other=1#frag",
    "deadbeef" * 64,
    "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@" * 5,
    " " * 200 + "x",
    "\n" * 100,
]
PUNCT = [
    "«quoted» „German“ “English” ‘single’ —em dash– en dash - hyphen … ellipsis",
    "¡¿¡¿!?‽⁇ ©®™ §¶ †‡ •·° ±×÷ ≠≤≥ ∞ √∑∏ ∫",
    "---\n===\n***\n___\n~~~\n```python\n```",
    "$100 €50 £30 ¥1000 ₹500 ₿0.1",
]
NEWER_UNICODE = ["Unicode 16 emoji \U0001FAE9 and Garay \U00010D50\U00010D51 digits \U00010D40\U00010D41"]


def base64_blob(n_bytes: int, seed: int = 7) -> str:
    """Deterministic base64 text of ``n_bytes`` random bytes."""
    rng = random.Random(seed)
    return base64.b64encode(bytes(rng.randrange(256) for _ in range(n_bytes))).decode()


def mixed_texts(count: int, seed: int = 11) -> list[str]:
    """Random concatenations of corpus pieces, to hit boundaries between kinds of text."""
    rng = random.Random(seed)
    pool = SCRIPTS + EMOJI + CODE + WHITESPACE + DIGITS + CONTRACTIONS + NFD + CONTROL + PUNCT
    return ["".join(rng.choice(pool)[: rng.randrange(1, 60)] for _ in range(rng.randrange(2, 6))) for _ in range(count)]


def corpus() -> list[str]:
    """Every parity text, deterministic and deduplicated, order kept."""
    texts = (SCRIPTS + EMOJI + CODE + WHITESPACE + DIGITS + CONTRACTIONS + NFD + CONTROL + SPECIAL_LITERALS
             + LONG + PUNCT + NEWER_UNICODE + [base64_blob(3000)] + mixed_texts(40))
    return list(dict.fromkeys(texts))
