"""Fixtures shared by the drafter-training suites."""

import pytest
import torch
from safetensors.torch import save_file


@pytest.fixture(scope="session")
def regen_data(tiny_target_dir, tmp_path_factory):
    """Sequences continued by the tiny target itself (what `lilicorr data regenerate` makes)."""
    from lilicorr.decoding.build import build_engine
    from lilicorr.decoding.request import Request
    from lilicorr.decoding.sampling import SamplingParams
    from lilicorr.runtime.runtime import TargetRuntime

    target = TargetRuntime.load(tiny_target_dir)
    g = torch.Generator().manual_seed(0)
    reqs = [
        Request(
            torch.randint(4, 2000, (8,), generator=g).tolist(),
            SamplingParams(max_tokens=24, ignore_eos=True, temperature=1.0 if i % 2 else 0.0, seed=i),
        )
        for i in range(40)
    ]
    build_engine(target).generate(reqs)
    tokens = torch.tensor([r.prompt_ids + r.output_ids for r in reqs], dtype=torch.int32)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 8:] = True
    path = tmp_path_factory.mktemp("regen") / "data.safetensors"
    save_file({"tokens": tokens, "loss_mask": mask, "sampled": torch.arange(40) % 2 == 1}, str(path))
    return path
