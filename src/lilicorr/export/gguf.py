"""GGUF drafters for llama.cpp (``lilicorr export --format gguf``), with llama.cpp's own converter.

Why not a GGUF writer of our own: llama.cpp's ``convert_hf_to_gguf.py`` defines what its DFlash
graph reads (tensor names, ``dflash.*`` keys, the target's tokenizer and mask token), and its
``gguf-py`` carries DFlash constants the ``gguf`` wheel lacks. So the converter and gguf-py come from
the pinned llama.cpp source (the ``llama-cpp-python`` sdist, which vendors llama.cpp), unpacked once
under ``build/llama.cpp/src`` — the same tree ``make llamacpp`` builds llama-server from.

The converter writes the DFlash backbone; what llama.cpp's DFlash file has no place for — the LiLiCorr
head, the convolution's keys, our ``dflash2`` arm as llama.cpp's DFlash2 selector, a reduced draft
vocabulary — is appended by ``gguf_append.py`` (``gguf_layout.py`` says what and why). The LiLiCorr head
runs in a llama-server built with ``patches/llama.cpp`` (``make llamacpp``); an unpatched llama.cpp refuses
the file (its tensor count does not match what it creates) instead of drafting without the head.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from lilicorr.export.gguf_layout import (
    GGUFExtras,
    conv_extras,
    draft_vocab_extras,
    draft_vocab_ids,
    identity_conv_extras,
    lattice_fits,
    lilicorr_extras,
    selector_extras,
)

LLAMA_CPP_PYTHON = ("llama-cpp-python", "0.3.36")  # vendors llama.cpp with DFlash / DFlash2 support
DEFAULT_ROOT = Path("build/llama.cpp")


def tree_root() -> Path:
    """``build/llama.cpp``, made on first use a link to the per-machine tree (``$LLAMA_CACHE``, else
    ``~/.cache/lilicorr/llama.cpp``) that ``make llamacpp`` builds in.

    Why a per-machine tree: the llama-server build takes ≈ 16 min on 2 cores, and every clone on the machine
    (CI's fresh clone among them) can share it. Whatever touches the tree first — the GGUF converter in a test,
    or ``make llamacpp`` — makes the link, so no clone ends up with a half tree of its own. A real folder
    already there (the layout before the cache) is kept."""
    if DEFAULT_ROOT.is_symlink() and not DEFAULT_ROOT.exists():  # the machine's tree was deleted: start it again
        DEFAULT_ROOT.resolve().mkdir(parents=True, exist_ok=True)
    if DEFAULT_ROOT.exists():
        return DEFAULT_ROOT
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache = Path(os.environ.get("LLAMA_CACHE") or base / "lilicorr" / "llama.cpp")
    cache.mkdir(parents=True, exist_ok=True)
    DEFAULT_ROOT.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # another process made it first
        DEFAULT_ROOT.symlink_to(cache.resolve(), target_is_directory=True)
    return DEFAULT_ROOT


def pinned_sdist(root: Path | None = None) -> Path:
    """The pinned ``llama-cpp-python`` sdist, kept in the machine's tree (``<tree_root()>/wheels``) and fetched
    with pip on first use.

    Why beside the tree, not in the clone's ``data/cache``: a fresh clone (CI's) reuses the machine's built
    llama-server, so nothing in it would download the sdist, yet the replay tests read llama-cpp-python's
    bindings from it. A copy already in the clone's ``data/cache/wheels`` (the older layout) is used as is."""
    root = root if root is not None else tree_root()
    pkg, ver = LLAMA_CPP_PYTHON
    name = f"{pkg.replace('-', '_')}-{ver}.tar.gz"
    for folder in (root / "wheels", Path("data/cache/wheels")):
        if (folder / name).exists():
            return folder / name
    cache = root / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(cache)]
    res = subprocess.run([*cmd, f"{pkg}=={ver}"], capture_output=True, text=True)
    if res.returncode != 0 or not (cache / name).exists():
        raise RuntimeError(f"pip download {pkg}=={ver} (sdist) failed: {res.stderr.strip()[-400:]}")
    return cache / name


def source_dir(root: Path | None = None) -> Path:
    """The pinned llama.cpp source tree, unpacked from the sdist on first use (default: ``tree_root()``)."""
    root = root if root is not None else tree_root()
    pkg, ver = LLAMA_CPP_PYTHON
    src = root / "src"
    stamp = root / "src.pin"
    if (src / "convert_hf_to_gguf.py").exists() and stamp.exists() and stamp.read_text().strip() == f"{pkg}=={ver}":
        return src
    sdist = pinned_sdist(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".src."))
    prefix = f"{pkg.replace('-', '_')}-{ver}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(prefix) :]
        tf.extractall(tmp, members=[m for m in members if m.name], filter="data")
    if src.exists():
        import shutil

        shutil.rmtree(src)
    os.replace(tmp, src)
    (root / "src.patches").unlink(missing_ok=True)  # a fresh unpack carries none of our patches
    stamp.write_text(f"{pkg}=={ver}\n")
    return src


def _backbone_folder(model, out: Path) -> None:
    """Save the DFlash backbone of ``model`` (no head) with a config the converter reads as plain DFlash: the
    convolution keys are left out (the converter would then ask for DFlash2's selector keys) and written back
    by us, while its tensors still go through the converter's own name mapping."""
    import torch

    from lilicorr.checkpoint import save_draft
    from lilicorr.models.draft import DraftModel

    cfg = copy.deepcopy(model.cfg)
    cfg.lilicorr = None
    backbone = DraftModel(cfg)
    backbone.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("lilicorr.")})
    save_draft(backbone, out, dtype=torch.float32)  # the converter rounds to --outtype; F32 tensors stay exact
    raw = json.loads((out / "config.json").read_text())
    for key in ("conv_kernel_size", "conv_group_size"):
        raw.get("dflash_config", {}).pop(key, None)
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")


def _extras(model, arm, draft_dir: Path, target_gguf: Path, draft_vocab: int | None) -> GGUFExtras:
    """Everything appended to the converter's file for this drafter (``gguf_layout.py``)."""
    cfg = model.cfg
    extras = GGUFExtras()
    if model.lilicorr is not None:
        if not lattice_fits(cfg.hidden_size, model.lilicorr.k):
            raise ValueError(
                f"{draft_dir}: LiLiCorr K={model.lilicorr.k} needs K+K² ≤ hidden_size={cfg.hidden_size} "
                "(llama.cpp packs a slot's lattice into one hidden-size row)"
            )
        extras = extras.merge(lilicorr_extras(model.lilicorr, cfg.rms_norm_eps, cfg.hidden_size))
    if cfg.conv_kernel_size:
        extras = extras.merge(conv_extras(cfg.conv_kernel_size, cfg.conv_group_size))
    if arm is not None:
        if arm.kind != "dflash2":
            raise ValueError(
                f"{draft_dir}: comparison arm {arm.kind!r} has no llama.cpp counterpart with the same semantics "
                "(only the 'dflash2' selector is exported, as llama.cpp's DFlash2)"
            )
        if model.lilicorr is not None:
            raise ValueError(f"{draft_dir}: a LiLiCorr head and a dflash2 arm on one drafter — export one of them")
        if not lattice_fits(cfg.hidden_size, arm.k):
            raise ValueError(f"{draft_dir}: selector K={arm.k} needs K+K² ≤ hidden_size={cfg.hidden_size}")
        extras = extras.merge(selector_extras(arm))
        if not cfg.conv_kernel_size:  # llama.cpp's DFlash2 loader insists on a convolution beside the selector
            extras = extras.merge(identity_conv_extras(cfg.num_hidden_layers, cfg.hidden_size, cfg.hidden_size))
    if draft_vocab:
        if not target_gguf.exists():
            raise ValueError(f"--draft-vocab copies the target's LM-head rows from {target_gguf}: not found")
        extras = extras.merge(
            draft_vocab_extras(draft_vocab_ids(draft_dir, draft_vocab, cfg.vocab_size), str(target_gguf))
        )
    return extras


def _append(src: Path, out: Path, extras: GGUFExtras) -> None:
    """``gguf_append.py`` under llama.cpp's gguf-py; ``out`` appears whole or not at all."""
    import numpy as np

    partial = out.with_name(f".{out.name}.tmp")
    with tempfile.TemporaryDirectory(prefix="lilicorr-extras-") as tmp:
        spec = {"keys": extras.keys, "drop": extras.drop, "rows": extras.rows}
        (Path(tmp) / "keys.json").write_text(json.dumps(spec))
        np.savez(Path(tmp) / "tensors.npz", **extras.tensors)
        env = {**os.environ, "PYTHONPATH": str(source_dir() / "gguf-py")}
        cmd = [sys.executable, str(Path(__file__).with_name("gguf_append.py")), str(src), str(partial), tmp]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"appending to {src} failed:\n{res.stderr.strip()[-1500:]}")
    os.replace(partial, out)


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


def target_gguf_of(target_dir: Path) -> Path:
    """The target's GGUF beside its folder (``make target`` writes both: ``DIR`` and ``DIR.gguf``)."""
    return target_dir.with_name(target_dir.name + ".gguf")


def export_gguf(
    draft_dir: str | Path,
    target_dir: str | Path,
    out: str | Path,
    outtype: str = "bf16",
    draft_vocab: int | None = None,
    backbone_only: bool = False,
) -> dict:
    """Convert a drafter to a llama.cpp GGUF (backbone + head / selector / reduced vocabulary); the file
    appears whole or not at all. ``backbone_only``: leave a LiLiCorr head or an arm out (the DFlash backbone
    alone, which any llama.cpp with DFlash runs — the baseline the head is measured against)."""
    from lilicorr.checkpoint import load_draft
    from lilicorr.models.arms import load_arm

    draft_dir, target_dir, out = Path(draft_dir), Path(target_dir), Path(out)
    if not (target_dir / "config.json").exists():
        raise ValueError(f"--target {target_dir}: not a Hugging Face model folder (config.json missing)")
    if draft_vocab is not None and draft_vocab <= 0:
        raise ValueError(f"--draft-vocab {draft_vocab}: expected a positive number of tokens")
    model = load_draft(draft_dir, int8_kernels=False)
    dropped = backbone_only and (model.lilicorr is not None or (draft_dir / "arm.json").exists())
    arm = None if backbone_only else load_arm(draft_dir)
    if backbone_only:
        model.lilicorr = None
    extras = _extras(model, arm, draft_dir, target_gguf_of(target_dir), draft_vocab)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lilicorr-gguf-") as tmp:
        folder = Path(tmp) / "draft"
        _backbone_folder(model, folder)
        backbone = Path(tmp) / "backbone.gguf"
        _convert(folder, backbone, outtype, ["--target-model-dir", str(target_dir)])
        if extras.keys or extras.tensors or extras.rows:
            _append(backbone, out, extras)
        else:
            os.replace(backbone, out)
    parts = ["lilicorr"] if model.lilicorr is not None else ["dflash"]
    parts += ["conv"] if model.cfg.conv_kernel_size else []
    parts += ["dflash2-selector"] if arm is not None else []
    parts += [f"draft-vocab-{draft_vocab}"] if draft_vocab else []
    return {"gguf": str(out), "bytes": out.stat().st_size, "layout": "+".join(parts), "head_dropped": dropped}
