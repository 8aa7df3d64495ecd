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
