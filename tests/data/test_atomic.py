"""Atomic writes: the file appears whole or not at all, with the permissions a plain write would give."""

import os

import pytest

from lilicorr.data.atomic import atomic_write, atomic_write_text


def test_atomic_file_has_plain_permissions_and_no_leftovers(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.json", "{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").read_text() == "{}\n"
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644  # readable by a server running as another user

    def broken(p):
        p.write_text("half")
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "b.json", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no partial file, no temp file


def test_an_atomic_folder_and_its_files_have_plain_permissions(tmp_path):
    """A drafter folder (``save_draft``): mkdtemp makes the folder owner-only and the safetensors writer its file."""
    import torch

    from lilicorr.data.atomic import atomic_write_dir

    def write(folder):
        from safetensors.torch import save_file

        save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
        (folder / "sub").mkdir()
        (folder / "sub" / "config.json").write_text("{}")

    old = os.umask(0o022)
    try:
        atomic_write_dir(tmp_path / "drafter", write)
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in [tmp_path / "drafter",
             *(tmp_path / "drafter").rglob("*")]}  # fmt: skip
    assert modes == {"drafter": 0o755, "drafter/model.safetensors": 0o644, "drafter/sub": 0o755,
                     "drafter/sub/config.json": 0o644}  # fmt: skip
