"""Which GGUF of a repo to fetch: quantization tags, split parts, and a choice that says why.

A repo usually holds one model in many quantizations (``...-Q4_K_M.gguf``,
``...-Q8_0.gguf``), some split into parts (``...-00001-of-00003.gguf``, which
llama.cpp loads from part 1 and finds the rest beside it).  Here the repo's
file list becomes :class:`RepoGGUF` entries (one per model file, parts
grouped) and :func:`choose` picks one: the tag asked for, else the preset's
default, else the best quantization that fits the machine's memory.

Pure functions of file names and sizes (plus the memory reading in
:func:`available_memory`), so they are tested without a hub.  Not handled:
vision projectors (``mmproj-*.gguf``) and LoRA adapters, which are skipped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

#: quantization tags, best quality first; :func:`choose` never picks above ``AUTO_CEILING`` on its own
QUALITY_ORDER = (
    "F32", "BF16", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_XL", "Q4_K_S",
    "IQ4_NL", "IQ4_XS", "Q4_1", "Q4_0", "MXFP4", "Q3_K_XL", "Q3_K_L", "Q3_K_M", "IQ3_M", "IQ3_S", "Q3_K_S",
    "IQ3_XS", "IQ3_XXS", "Q2_K_XL", "Q2_K", "Q2_K_L", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S",
    "TQ2_0", "TQ1_0",
)
#: 8-bit is near-lossless at half the size of F16, and faster: the best an automatic choice takes
AUTO_CEILING = "Q8_0"
#: the share of available memory the weights may take (the rest: KV cache, the app, the system)
MEMORY_SHARE = 0.75

_TAG = re.compile(r"(?<![A-Z0-9])(I?Q[1-8]_(?:K_(?:XXS|XS|XL|S|M|L)|K|XXS|XS|NL|S|M|[01])|TQ[12]_0|BF16|F16|F32|MXFP4)"
                  r"(?![A-Z0-9])")
SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


@dataclass
class RepoGGUF:
    """One model file of a repo; ``paths`` has every part in order (one for a single file)."""

    paths: list[str]
    size: int
    quant: str
    #: path -> (size, sha256 or "" when the hub gave none)
    parts: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """The file to load: the only one, or part 1 of a split."""
        return self.paths[0]

    @property
    def split(self) -> bool:
        return len(self.paths) > 1


def quant_tag(path: str) -> str:
    """The quantization tag in a file name (``Qwen2.5-0.5B-Q4_K_M.gguf`` -> ``Q4_K_M``), or ""."""
    name = path.upper().rsplit("/", 1)
    for text in reversed(name):  # the file name first, then a folder named after the tag
        found = _TAG.findall(text.replace(".GGUF", ""))
        if found:
            return found[-1]
    return ""


def quality_rank(tag: str) -> int:
    """Lower is better; unknown tags rank after every known one."""
    return QUALITY_ORDER.index(tag) if tag in QUALITY_ORDER else len(QUALITY_ORDER)


def _skipped(path: str) -> bool:
    name = path.rsplit("/", 1)[-1].lower()
    return "mmproj" in name or "lora" in name or "imatrix" in name


def repo_ggufs(files: list[tuple[str, int, str]]) -> list[RepoGGUF]:
    """Model files from a repo listing of (path, size, sha256); split parts grouped; best first.

    A split whose parts are not all listed is left out: it could not be loaded.
    """
    singles: list[RepoGGUF] = []
    splits: dict[str, dict[int, tuple[str, int, str]]] = {}
    counts: dict[str, int] = {}
    for path, size, sha in files:
        if not path.lower().endswith(".gguf") or _skipped(path):
            continue
        match = SPLIT.search(path)
        if match:
            stem = path[:match.start()]
            splits.setdefault(stem, {})[int(match[1])] = (path, size, sha)
            counts[stem] = int(match[2])
        else:
            singles.append(RepoGGUF([path], size, quant_tag(path), {path: (size, sha)}))
    for stem, parts in splits.items():
        if sorted(parts) != list(range(1, counts[stem] + 1)):
            continue
        ordered = [parts[i] for i in sorted(parts)]
        singles.append(RepoGGUF([p for p, _, _ in ordered], sum(s for _, s, _ in ordered), quant_tag(stem),
                                {p: (s, h) for p, s, h in ordered}))
    return sorted(singles, key=lambda g: (quality_rank(g.quant), g.size, g.path))


def available_memory() -> int:
    """Bytes of memory a model could use now (:func:`backends.fit.available_ram`: one reader of the machine's
    memory for the plan before loading and the choice of a download)."""
    from backends.fit import available_ram

    return available_ram()


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


class NoSuchQuant(LookupError):
    """The repo has no file with the tag asked for; the message lists the tags it has."""


def with_tag(ggufs: list[RepoGGUF], tag: str) -> RepoGGUF | None:
    tag = tag.upper()
    for gguf in ggufs:
        if gguf.quant == tag or re.search(rf"(?<![A-Z0-9]){re.escape(tag)}(?![A-Z0-9])", gguf.path.upper()):
            return gguf
    return None


def choose(ggufs: list[RepoGGUF], *, quant: str | None = None, preset_quant: str | None = None,
           preset: str | None = None, memory: int | None = None) -> tuple[RepoGGUF, str]:
    """The file to fetch and one sentence saying why.

    ``quant`` (asked for) must exist; ``preset_quant`` is used when present;
    otherwise the best quantization up to :data:`AUTO_CEILING` whose size fits
    in :data:`MEMORY_SHARE` of ``memory`` (default: :func:`available_memory`),
    and when nothing fits, the smallest file.
    """
    if not ggufs:
        raise NoSuchQuant("the repo has no GGUF model files")
    tags = ", ".join(g.quant or g.path for g in ggufs)
    if quant:
        found = with_tag(ggufs, quant)
        if found is None:
            raise NoSuchQuant(f"no {quant.upper()} file in the repo (it has: {tags})")
        return found, f"{found.quant or quant.upper()}, as asked"
    if preset_quant:
        found = with_tag(ggufs, preset_quant)
        if found is not None:
            return found, f"{found.quant}, the default of preset {preset}" if preset else f"{found.quant}, the default"
    memory = available_memory() if memory is None else memory
    budget = int(memory * MEMORY_SHARE)
    ceiling = quality_rank(AUTO_CEILING)
    fitting = [g for g in ggufs if g.size <= budget and quality_rank(g.quant) >= ceiling]
    if fitting:
        best = fitting[0]  # ggufs are sorted best quality first
        return best, (f"{best.quant or best.path}, the best quantization up to {AUTO_CEILING} that fits in "
                      f"{_gb(budget)} ({MEMORY_SHARE:.0%} of the {_gb(memory)} of memory available)")
    if not any(quality_rank(g.quant) >= ceiling for g in ggufs):
        fitting = [g for g in ggufs if g.size <= budget]
        if fitting:
            return fitting[0], (f"{fitting[0].quant or fitting[0].path}, the best that fits in {_gb(budget)}: "
                                f"the repo has nothing at {AUTO_CEILING} or below")
    smallest = min(ggufs, key=lambda g: g.size)
    return smallest, (f"{smallest.quant or smallest.path}, the smallest file: none fits in {_gb(budget)} "
                      f"({MEMORY_SHARE:.0%} of the {_gb(memory)} of memory available), so expect swapping")
