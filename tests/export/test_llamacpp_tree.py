"""``make llamacpp``'s patching of the vendored llama.cpp tree, on a stand-in tree: applied once, an edited
patch replaces the old one (reversed first, so exactly its files change), a patch that does not apply is named
and leaves the tree as it was."""

import shutil
from pathlib import Path

import pytest

from lilicorr.export.gguf import LLAMA_CPP_PYTHON
from lilicorr.export.llamacpp_tree import patch_hash, patched_source_dir


def _patch(old: str, new: str) -> str:
    return f"--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n {old.splitlines()[0]}\n-{old.splitlines()[1]}\n+{new}\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "llama.cpp"
    (root / "src").mkdir(parents=True)
    (root / "src" / "convert_hf_to_gguf.py").write_text("")
    (root / "src" / "f.txt").write_text("keep\nupstream\n")
    (root / "src.pin").write_text("{}=={}\n".format(*LLAMA_CPP_PYTHON))
    return root


def test_patch_applied_then_replaced(tree, tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-x.patch").write_text(_patch("keep\nupstream", "one"))
    first = patch_hash(patches)
    src = patched_source_dir(tree, patches)
    assert (src / "f.txt").read_text() == "keep\none\n"
    assert patched_source_dir(tree, patches) == src and (src / "f.txt").read_text() == "keep\none\n"  # idempotent
    (patches / "0001-x.patch").write_text(_patch("keep\nupstream", "two"))
    assert patch_hash(patches) != first
    patched_source_dir(tree, patches)
    assert (src / "f.txt").read_text() == "keep\ntwo\n"
    (patches / "0001-x.patch").unlink()
    patched_source_dir(tree, patches)
    assert (src / "f.txt").read_text() == "keep\nupstream\n" and not (tree / "src.patches").exists()


def test_patch_that_does_not_apply_is_named(tree, tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-x.patch").write_text(_patch("keep\nsomething else", "one"))
    with pytest.raises(RuntimeError, match="does not apply"):
        patched_source_dir(tree, patches)
    assert (tree / "src" / "f.txt").read_text() == "keep\nupstream\n"


def test_tree_root_links_the_per_machine_tree_once(tmp_path, monkeypatch):
    """The first use makes build/llama.cpp a link to $LLAMA_CACHE, so a clone's tests and `make llamacpp` share
    the machine's build; an existing folder (link or real) is kept as it is."""
    from lilicorr.export.gguf import tree_root

    cache = tmp_path / "cache" / "llama.cpp"
    monkeypatch.setenv("LLAMA_CACHE", str(cache))
    clone = tmp_path / "clone"
    clone.mkdir()
    monkeypatch.chdir(clone)
    root = tree_root()
    assert root.is_symlink() and root.resolve() == cache.resolve() and cache.is_dir()
    (root / "marker").write_text("x")
    assert tree_root() == root and (cache / "marker").read_text() == "x"
    shutil.rmtree(cache)  # a deleted machine tree behind the link is made again, not left dangling
    assert tree_root() == root and cache.is_dir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "build" / "llama.cpp").mkdir(parents=True)
    assert not tree_root().is_symlink()  # the layout before the cache: a real folder stays in use


def test_pinned_sdist_lives_beside_the_machine_tree(tmp_path, monkeypatch):
    """A fresh clone that reuses the machine's llama-server still finds the sdist (the replay tests read
    llama-cpp-python's bindings from it): it is fetched once into <tree>/wheels, and a failed fetch is named."""
    import subprocess

    from lilicorr.export import gguf

    monkeypatch.chdir(tmp_path)
    root = tmp_path / "tree"
    name = "{}-{}.tar.gz".format(LLAMA_CPP_PYTHON[0].replace("-", "_"), LLAMA_CPP_PYTHON[1])
    calls = []

    def fake_pip(cmd, **kw):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / name).write_bytes(b"sdist")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(gguf.subprocess, "run", fake_pip)
    assert gguf.pinned_sdist(root) == root / "wheels" / name and len(calls) == 1
    assert gguf.pinned_sdist(root) == root / "wheels" / name and len(calls) == 1  # kept, not fetched again

    monkeypatch.setattr(gguf.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "no net"))
    with pytest.raises(RuntimeError, match=r"pip download llama-cpp-python==.*no net"):
        gguf.pinned_sdist(tmp_path / "other")
    (tmp_path / "data" / "cache" / "wheels").mkdir(parents=True)
    (tmp_path / "data" / "cache" / "wheels" / name).write_bytes(b"old layout")
    assert gguf.pinned_sdist(tmp_path / "other") == Path("data/cache/wheels") / name
