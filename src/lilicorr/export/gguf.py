"""GGUF drafters for llama.cpp (``lilicorr export --format gguf``), with llama.cpp's own converter.

Why not a GGUF writer of our own: llama.cpp's ``convert_hf_to_gguf.py`` defines what its DFlash
graph reads (tensor names, ``dflash.*`` keys, the target's tokenizer and mask token), and its
``gguf-py`` carries DFlash constants the ``gguf`` wheel lacks. So the converter and gguf-py come from
the pinned llama.cpp source (the ``llama-cpp-python`` sdist, which vendors llama.cpp), unpacked once
under ``build/llama.cpp/src`` — the same tree ``make llamacpp`` builds llama-server from.

llama.cpp has DFlash but no LiLiCorr head: a LiLiCorr drafter is exported as its DFlash backbone
(``DFlashDraftModel``), and the command says so.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

LLAMA_CPP_PYTHON = ("llama-cpp-python", "0.3.36")  # vendors llama.cpp with DFlash / DFlash2 support
DEFAULT_ROOT = Path("build/llama.cpp")


def source_dir(root: Path = DEFAULT_ROOT, cache: Path = Path("data/cache/wheels")) -> Path:
    """The pinned llama.cpp source tree, unpacked from the sdist on first use."""
    pkg, ver = LLAMA_CPP_PYTHON
    src = root / "src"
    stamp = root / "src.pin"
    if (src / "convert_hf_to_gguf.py").exists() and stamp.exists() and stamp.read_text().strip() == f"{pkg}=={ver}":
        return src
    sdists = sorted(cache.glob(f"{pkg.replace('-', '_')}-{ver}.tar.gz"))
    if not sdists:
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(cache)]
        res = subprocess.run([*cmd, f"{pkg}=={ver}"], capture_output=True, text=True)
        sdists = sorted(cache.glob(f"{pkg.replace('-', '_')}-{ver}.tar.gz"))
        if res.returncode != 0 or not sdists:
            raise RuntimeError(f"pip download {pkg}=={ver} (sdist) failed: {res.stderr.strip()[-400:]}")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".src."))
    prefix = f"{pkg.replace('-', '_')}-{ver}/vendor/llama.cpp/"
    with tarfile.open(sdists[0]) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(prefix) :]
        tf.extractall(tmp, members=[m for m in members if m.name], filter="data")
    if src.exists():
        import shutil

        shutil.rmtree(src)
    os.replace(tmp, src)
    stamp.write_text(f"{pkg}=={ver}\n")
    return src


def backbone_folder(draft_dir: Path, out: Path) -> bool:
    """Write the DFlash backbone of ``draft_dir`` to ``out``; True when a LiLiCorr head was dropped."""
    from lilicorr.checkpoint import load_draft, save_draft
    from lilicorr.models.draft import DraftModel

    model = load_draft(draft_dir, int8_kernels=False)
    if model.lilicorr is None:
        save_draft(model, out)
        return False
    cfg = copy.deepcopy(model.cfg)
    cfg.lilicorr = None
    backbone = DraftModel(cfg)
    backbone.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("lilicorr.")})
    save_draft(backbone, out)
    return True


def _refuse_convolution(draft_dir: Path) -> None:
    """llama.cpp reads a DFlash config with ``conv_kernel_size`` as DFlash2, whose graph also needs DFlash2's
    selector (``selector_rank``, ``selector_top_k`` and its weights). A LiLiCorr drafter with the convolution has
    no selector, so no llama.cpp architecture runs it: refuse before the converter fails on a missing key."""
    from lilicorr.checkpoint import read_draft_config

    taps = read_draft_config(draft_dir).conv_kernel_size
    if taps:
        raise ValueError(
            f"{draft_dir / 'config.json'}: dflash_config.conv_kernel_size={taps} — llama.cpp runs a convolution "
            "only as DFlash2, which also needs DFlash2's selector (selector_rank, selector_top_k and its weights); "
            "this drafter has none, so there is no llama.cpp architecture for it. Export a drafter without the "
            "convolution (e.g. models/smollm2-lilicorr) for llama.cpp; vLLM and SGLang load this folder as it is."
        )


def _convert(model_dir: Path, out: Path, outtype: str, extra: list[str]) -> None:
    """llama.cpp's own converter on a Hugging Face folder; ``out`` appears whole or not at all."""
    src = source_dir()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.tmp")
    env = {**os.environ, "PYTHONPATH": str(src / "gguf-py")}
    cmd = [sys.executable, str(src / "convert_hf_to_gguf.py"), str(model_dir), *extra]
    cmd += ["--outfile", str(partial), "--outtype", outtype]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp's converter failed on {model_dir}:\n{res.stderr.strip()[-1500:]}")
    os.replace(partial, out)


def export_gguf(draft_dir: str | Path, target_dir: str | Path, out: str | Path, outtype: str = "bf16") -> dict:
    """Convert a drafter to a llama.cpp GGUF; the file appears whole or not at all."""
    draft_dir, target_dir, out = Path(draft_dir), Path(target_dir), Path(out)
    if not (target_dir / "config.json").exists():
        raise ValueError(f"--target {target_dir}: not a Hugging Face model folder (config.json missing)")
    _refuse_convolution(draft_dir)
    with tempfile.TemporaryDirectory(prefix="lilicorr-gguf-") as tmp:
        folder = Path(tmp) / "draft"
        dropped = backbone_folder(draft_dir, folder)
        _convert(folder, out, outtype, ["--target-model-dir", str(target_dir)])
    return {
        "gguf": str(out),
        "bytes": out.stat().st_size,
        "head_dropped": dropped,
        "note": "llama.cpp runs the DFlash backbone; it has no LiLiCorr head" if dropped else "",
    }
