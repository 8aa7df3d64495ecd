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
