"""Save, validate and load draft checkpoints (``config.json`` + ``model.safetensors``).

Loading is all-or-nothing: the config, the target compatibility and every tensor name and shape
are checked against a model built on the meta device *before* any weight is read, and one
``CheckpointError`` names the culprit (field or tensor, expected vs found).

Two tensor-naming schemes exist for the head's MLPs (docs/guide/head.md, Tensors). Scheme A is what vLLM
0.32/0.33 and SGLang 0.5.23 load, so it is what we write; Scheme B (``nn.Sequential`` indices,
ModelOpt's exporter) is accepted on load and can be written on request.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from lilicorr.data.atomic import atomic_write_dir
from lilicorr.models.config import CheckpointError, DraftConfig
from lilicorr.models.draft import DraftModel

# The LiLiCorr head's tensor names in Scheme A (vLLM / SGLang) and Scheme B (ModelOpt's nn.Sequential
# indices), one pair per module; ``{i}`` is a layer index.
_SCHEME_PAIRS = (
    ("lilicorr.feature_norm.", "lilicorr.feature_mlp.0."),
    ("lilicorr.feature_mlp.up_proj.", "lilicorr.feature_mlp.1."),
    ("lilicorr.feature_mlp.down_proj.", "lilicorr.feature_mlp.3."),
    ("lilicorr.layers.{i}.mlp.up_proj.", "lilicorr.layers.{i}.mlp.0."),
    ("lilicorr.layers.{i}.mlp.down_proj.", "lilicorr.layers.{i}.mlp.2."),
)


def _rules(pairs) -> tuple[tuple[str, str], ...]:
    """(pattern, replacement) rules mapping each pair's first name to its second."""
    return tuple(("^" + re.escape(src).replace(r"\{i\}", r"(\d+)"), dst.replace("{i}", r"\1")) for src, dst in pairs)


_A_TO_B = _rules(_SCHEME_PAIRS)
_B_TO_A = _rules((b, a) for a, b in _SCHEME_PAIRS)
# Present in some exports, never used: the engines take these from the target / recompute them.
_TOLERATED = re.compile(r"^(embed_tokens\.weight|rotary_emb\.inv_freq|layers\.\d+\.self_attn\.rotary_emb\..*)$")


def _rename(name: str, rules) -> str:
    for pat, rep in rules:
        new, n = re.subn(pat, rep, name)
        if n:
            return new
    return name


def to_scheme_b(name: str) -> str:
    return _rename(name, _A_TO_B)


def to_scheme_a(name: str) -> str:
    """Canonical (Scheme A) name of a checkpoint tensor: ``model.`` prefix stripped, B mapped to A."""
    if name.startswith("model."):
        name = name[len("model.") :]
    return _rename(name, _B_TO_A)


def save_draft(
    model: DraftModel,
    out: str | Path,
    scheme: str = "A",
    dtype: torch.dtype = torch.bfloat16,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` atomically: the folder appears whole or not at all."""
    if scheme not in ("A", "B"):
        raise ValueError(f"scheme must be 'A' or 'B', got {scheme!r}")
    cfg = model.cfg.to_dict()
    cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    tensors = {}
    for name, t in model.state_dict().items():
        key = to_scheme_b(name) if scheme == "B" else name
        tensors[key] = t.detach().to(dtype).contiguous()

    def write(tmp: Path) -> None:
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt", "scheme": scheme})
        for fname, text in (extra_files or {}).items():
            (tmp / fname).write_text(text)

    atomic_write_dir(Path(out), write)
    return Path(out)


def read_draft_config(path: str | Path) -> DraftConfig:
    path = Path(path)
    cfg_path = path / "config.json"
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory")
    if not cfg_path.exists():
        raise CheckpointError(f"{cfg_path}: not found")
    try:
        raw = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg_path}: not valid JSON ({e.msg} at line {e.lineno})") from e
    return DraftConfig.from_dict(raw, where=str(cfg_path))


def check_target_compat(cfg: DraftConfig, target_cfg, where: str) -> None:
    """``target_cfg``: the target's HF config (vocab_size, hidden_size, num_hidden_layers)."""
    tv, th, tl = target_cfg.vocab_size, target_cfg.hidden_size, target_cfg.num_hidden_layers
    if cfg.vocab_size != tv:
        raise CheckpointError(
            f"{where}: field 'vocab_size' = {cfg.vocab_size} but the target has {tv} "
            "(candidates need the full target vocabulary)"
        )
    if cfg.hidden_size != th:
        raise CheckpointError(
            f"{where}: field 'hidden_size' = {cfg.hidden_size} but the target embedding width "
            f"is {th} (the draft embeds tokens with the target's table)"
        )
    bad = [i for i in cfg.target_layer_ids if i >= tl]
    if bad:
        raise CheckpointError(
            f"{where}: field 'dflash_config.target_layer_ids' = {cfg.target_layer_ids}: {bad} "
            f"beyond the target's {tl} layers (valid 0..{tl - 1})"
        )
    if (cfg.target_hidden_size or cfg.hidden_size) != th:
        raise CheckpointError(
            f"{where}: field 'target_hidden_size' = {cfg.target_hidden_size} but the target hidden size is {th}"
        )


def _expected_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = DraftModel(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _checkpoint_files(path: Path) -> list[Path]:
    single = path / "model.safetensors"
    if single.exists():
        return [single]
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [f for f in files if not (path / f).exists()]
        if missing:
            raise CheckpointError(f"{index}: shard files {missing} not found")
        return [path / f for f in files]
    raise CheckpointError(f"{path}: model.safetensors not found")


class ValidatedFolder(NamedTuple):
    cfg: DraftConfig
    sources: dict[str, tuple[Path, str]]  # canonical tensor name → (file, name in the file)
    quantized: dict[str, str]  # quantized module → scheme ("nvfp4" | "int8"); empty when unquantized


_SCALE_SUFFIXES = (".weight_scale_2", ".weight_scale", ".input_scale")


def _quantized_shapes(scheme: str, module: str, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    out_f, in_f = shape
    if scheme == "nvfp4":
        return {
            f"{module}.weight": (out_f, in_f // 2),
            f"{module}.weight_scale": (out_f, in_f // 16),
            f"{module}.weight_scale_2": (),
        }
    return {f"{module}.weight": (out_f, in_f), f"{module}.weight_scale": (out_f, 1)}


def validate_draft_folder(path: str | Path, target_cfg=None) -> ValidatedFolder:
    """Check config, target compatibility, quantization rules and tensor coverage."""
    from lilicorr.checkpoint.quant import check_exclusions, must_stay_float, scheme_of

    path = Path(path)
    cfg = read_draft_config(path)
    where = str(path / "config.json")
    scheme, exclude = scheme_of(json.loads((path / "config.json").read_text()).get("quantization_config"), where)
    if target_cfg is not None:
        check_target_compat(cfg, target_cfg, where)
    expected = _expected_shapes(cfg)
    found: dict[str, tuple[Path, str]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for f in _checkpoint_files(path):
        try:
            with safe_open(str(f), framework="pt") as sf:
                for raw in sf.keys():  # noqa: SIM118 - safe_open is not a dict
                    name = to_scheme_a(raw)
                    if name in found:
                        raise CheckpointError(f"{f}: tensor '{raw}' duplicates '{found[name][1]}'")
                    found[name] = (f, raw)
                    shapes[name] = tuple(sf.get_slice(raw).get_shape())
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001 - a corrupt file is reported with its name
            raise CheckpointError(f"{f}: cannot read safetensors ({e})") from e
    quantized: dict[str, str] = {}
    scale_modules = {n[: -len(sfx)] for n in found for sfx in _SCALE_SUFFIXES if n.endswith(sfx)}
    if scale_modules and scheme is None:
        raise CheckpointError(
            f"{path}: quantization scales for {sorted(scale_modules)[:4]} but config.json has no quantization_config"
        )
    if scheme is not None:
        with torch.device("meta"):
            meta_model = DraftModel(cfg)
        check_exclusions(meta_model, exclude, where)
        bad = sorted(m for m in scale_modules if must_stay_float(m))
        if bad:
            raise CheckpointError(
                f"{path}: module '{bad[0]}' is quantized but must stay floating point "
                "(vLLM and SGLang read it as a float tensor)"
            )
        for module in sorted(scale_modules):
            if f"{module}.weight" not in expected:
                raise CheckpointError(f"{path}: quantization scales for '{module}', which is not a linear layer")
            quantized[module] = scheme
            shape = expected.pop(f"{module}.weight")
            expected.update(_quantized_shapes(scheme, module, shape))
    if cfg.has_own_lm_head and "lm_head.weight" not in found:
        raise CheckpointError(f"{where}: 'has_own_lm_head' is true but tensor 'lm_head.weight' is missing")
    ignored = {n for n in found if _TOLERATED.match(n) or (n == "lm_head.weight" and not cfg.has_own_lm_head)}
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected) - ignored)
    if "lilicorr.token_proj.weight" in unexpected and cfg.lilicorr is not None:
        raise CheckpointError(
            f"{path}: tensor 'lilicorr.token_proj.weight' present but lilicorr_hidden_size "
            f"= draft hidden size {cfg.hidden_size} (token_proj must be absent then)"
        )
    if missing:
        raise CheckpointError(
            f"{path}: missing tensors {missing[:8]}{' …' if len(missing) > 8 else ''} ({len(missing)} in all)"
        )
    if unexpected:
        raise CheckpointError(
            f"{path}: unexpected tensors {unexpected[:8]}{' …' if len(unexpected) > 8 else ''} "
            f"({len(unexpected)} in all)"
        )
    for name, shape in expected.items():
        if shapes[name] != shape:
            raise CheckpointError(
                f"{path}: tensor '{found[name][1]}' has shape {list(shapes[name])}, expected {list(shape)}"
            )
    return ValidatedFolder(cfg, {n: found[n] for n in expected}, quantized)


def load_draft(
    path: str | Path,
    target_cfg=None,
    dtype: torch.dtype = torch.float32,
    int8_kernels: bool = True,
) -> DraftModel:
    """Validate everything, then build and fill the model (strict); nothing partial is returned.

    Quantized checkpoints: NVFP4 weights are dequantized to ``dtype``; int8 layers run as W8A8
    ``Int8Linear`` (``torch._int_mm``) unless ``int8_kernels`` is False (dequantized then).
    """
    from lilicorr.checkpoint.quant import Int8Linear, dequantize_nvfp4

    cfg, sources, quantized = validate_draft_folder(path, target_cfg)
    raw_t: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[tuple[str, str]]] = {}
    for name, (f, raw) in sources.items():
        by_file.setdefault(f, []).append((name, raw))
    for f, names in by_file.items():
        with safe_open(str(f), framework="pt") as sf:
            for name, raw in names:
                t = sf.get_tensor(raw)
                module = name.rsplit(".", 1)[0]
                if not t.is_floating_point() and module not in quantized and not name.endswith(_SCALE_SUFFIXES):
                    raise CheckpointError(f"{f}: tensor '{raw}' has dtype {t.dtype} but its module is not quantized")
                raw_t[name] = t
    state: dict[str, torch.Tensor] = {}
    int8: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, t in raw_t.items():
        if name.endswith(_SCALE_SUFFIXES):
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        scheme = quantized.get(module) if module else None
        if scheme == "nvfp4":
            t = dequantize_nvfp4(t, raw_t[f"{module}.weight_scale"], raw_t[f"{module}.weight_scale_2"])
        elif scheme == "int8":
            scale = raw_t[f"{module}.weight_scale"].float()
            int8[module] = (t, scale)
            t = t.float() * scale
        state[name] = t.to(dtype)
    model = DraftModel(cfg).to(dtype)
    model.load_state_dict(state, strict=True)
    if int8_kernels:
        for module, (w, scale) in int8.items():
            parent_name, _, child = module.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            lin = getattr(parent, child)
            setattr(parent, child, Int8Linear(w, scale, lin.bias.detach() if lin.bias is not None else None, dtype))
    return model.eval()
