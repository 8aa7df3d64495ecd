import json

import torch

from lilicorr.training.regenerate import RegenConfig, load_regenerated, regenerate


def test_chat_rows_are_templated_padded_and_masked(tiny_target_dir, tmp_path):
    from transformers import AutoTokenizer

    from lilicorr.data.chat import row_ids

    rows = [{"id": i, "messages": [{"role": "user", "content": f"def f{i}(x):" + " y" * i}]} for i in range(6)]
    rows.append({"id": "long", "messages": [{"role": "user", "content": "word " * 400}]})  # over the prompt budget
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "regen.safetensors"
    cfg = RegenConfig(
        target=str(tiny_target_dir),
        corpus="unused",
        out=str(out),
        num_sequences=8,
        new_tokens=12,
        batch_size=4,
        prompts=str(prompts),
        max_prompt_tokens=64,
    )
    meta = regenerate(cfg)
    data = load_regenerated(out)
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    assert meta["sequences"] == 6 and data["tokens"].shape == (6, 64 + 12)  # the long prompt is skipped
    assert data["sampled"].tolist() == [False, True] * 3
    for i in range(6):
        ids = row_ids(tok, rows[i])
        toks, mask = data["tokens"][i], data["loss_mask"][i]
        assert toks[: len(ids)].tolist() == ids  # the chat template, left-aligned
        assert not mask[: len(ids)].any() and mask[len(ids)]  # the answer only is supervised
        n = int(mask.sum())
        assert 1 <= n <= 12 and mask[len(ids) : len(ids) + n].all()
    assert meta["answer_tokens"] == int(data["loss_mask"].sum())
    # resumable: a rerun reuses the shards and writes the same file
    before = out.read_bytes()
    regenerate(cfg)
    assert out.read_bytes() == before and torch.equal(load_regenerated(out)["tokens"], data["tokens"])
