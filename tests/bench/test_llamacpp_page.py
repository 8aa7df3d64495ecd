"""The llama.cpp page's Notes section is rewritten from the notes file alone (``--notes-only``), leaving the measured
tables as the run wrote them."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "llamacpp_speed.py"


def test_notes_only_replaces_the_notes_section_and_nothing_else(tmp_path):
    spec = importlib.util.spec_from_file_location("llamacpp_speed", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    page = tmp_path / "page.md"
    table = "# t\n\n| arm | tokens/s |\n|---|---|\n| AR | 48.4 |\n\n## The LiLiCorr head's share\n\nx\n"
    page.write_text(table + "\n## Notes\n\n- old bullet\n")
    notes = tmp_path / "notes.md"
    notes.write_text("- new bullet\n- another\n")
    mod.splice_notes(page, notes)
    assert page.read_text() == table + "\n## Notes\n\n- new bullet\n- another\n"
    page.write_text(table)  # a page without notes gets the section appended
    mod.splice_notes(page, notes)
    assert page.read_text() == table + "\n## Notes\n\n- new bullet\n- another\n"


def test_export_drafters_writes_each_arm_now_under_its_name(tmp_path, monkeypatch):
    """The llama.cpp benchmarks' drafters are exported on every run (a file left from before a promotion would be
    the old drafter), named FOLDER-SUFFIX.gguf, with each arm's export options."""
    import lilicorr.export.gguf as gguf
    from lilicorr.bench.llamacpp import export_drafters

    calls = []
    monkeypatch.setattr(
        gguf, "export_gguf", lambda d, t, out, **kw: (calls.append((d, t, kw)), out.write_bytes(b"GGUF"))
    )
    stale = tmp_path / "x-dflash-full.gguf"
    stale.write_bytes(b"old")
    plan = [("DFlash", "m/x-dflash", {}, "full"), ("16k", "m/x-dflash", {"draft_vocab": 16384}, "v16k")]
    arms = export_drafters(plan, "m/t", tmp_path)
    assert arms == {"DFlash": stale, "16k": tmp_path / "x-dflash-v16k.gguf"} and stale.read_bytes() == b"GGUF"
    assert calls == [("m/x-dflash", "m/t", {}), ("m/x-dflash", "m/t", {"draft_vocab": 16384})]
