"""Append keys and tensors to a GGUF file: ``python gguf_append.py SRC DST EXTRAS_DIR``.

Runs as a script with llama.cpp's own ``gguf-py`` first on ``PYTHONPATH`` (as the converter does), so
the file is written by the same library llama.cpp's converter uses; it imports nothing from lilicorr.
``EXTRAS_DIR`` holds ``tensors.npz`` and ``keys.json``: ``{"keys": {name: [type, value]}, "drop": [tensor
names], "rows": {name: {"gguf": path, "tensors": [names], "ids": [...]}}}``; a ``rows`` entry copies those
rows of another GGUF's tensor raw, in its own (possibly quantized) type. Every key and tensor of SRC is
copied unchanged (except dropped tensors), then the new ones follow. A key or tensor that SRC already has
is an error: nothing is silently overwritten.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def append(src: str, dst: str, extras_dir: str) -> None:
    import gguf
    import numpy as np

    spec = json.loads((Path(extras_dir) / "keys.json").read_text())
    with np.load(Path(extras_dir) / "tensors.npz") as npz:
        new_tensors = {name: (npz[name], None) for name in npz.files}
    for name, spec_rows in spec.get("rows", {}).items():
        other = {t.name: t for t in gguf.GGUFReader(spec_rows["gguf"]).tensors}
        found = [other[n] for n in spec_rows["tensors"] if n in other]
        if not found:
            raise SystemExit(f"{spec_rows['gguf']}: none of the tensors {spec_rows['tensors']}")
        rows = np.ascontiguousarray(found[0].data[np.asarray(spec_rows["ids"], dtype=np.int64)])
        new_tensors[name] = (rows, found[0].tensor_type)
    reader = gguf.GGUFReader(src)
    arch_field = reader.fields[gguf.Keys.General.ARCHITECTURE]
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode()
    writer = gguf.GGUFWriter(dst, arch, endianess=reader.endianess)

    old_keys = set()
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        old_keys.add(f.name)
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    types = {"u32": gguf.GGUFValueType.UINT32, "f32": gguf.GGUFValueType.FLOAT32, "str": gguf.GGUFValueType.STRING}
    for name, (kind, value) in spec["keys"].items():
        if name in old_keys:
            raise SystemExit(f"{src}: already has key {name!r}")
        writer.add_key_value(name, value, types[kind])

    drop = set(spec["drop"])
    kept = [t for t in reader.tensors if t.name not in drop]
    clash = {t.name for t in kept} & new_tensors.keys()
    if clash:
        raise SystemExit(f"{src}: already has tensors {sorted(clash)}")
    raw = {np.dtype(np.float32): gguf.GGMLQuantizationType.F32, np.dtype(np.int64): gguf.GGMLQuantizationType.I64}
    for t in kept:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    for name, (arr, qtype) in new_tensors.items():
        if qtype is None and arr.dtype not in raw:
            raise SystemExit(f"tensor {name!r}: dtype {arr.dtype} (expected float32 or int64)")
        writer.add_tensor_info(name, arr.shape, arr.dtype, arr.nbytes, qtype if qtype is not None else raw[arr.dtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in kept:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    for arr, _ in new_tensors.values():
        writer.write_tensor_data(arr)
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    # this folder also holds lilicorr's gguf.py: keep it off the path so `import gguf` is llama.cpp's gguf-py
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    append(*sys.argv[1:])
