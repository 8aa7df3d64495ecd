"""``python -m lilicorr.serve.run TARGET [--speculative-config JSON] [--load-policy] …``: the server with
the speculative config exactly as given, for comparisons against the default (``lilicorr serve``, whose
speculative configs run under the load policy). The serving benchmark starts its ``fixed`` arms with it."""

from __future__ import annotations

import argparse
import json


def main(argv: list[str] | None = None) -> None:
    import torch
    import uvicorn

    from lilicorr.serve.server import build

    p = argparse.ArgumentParser(prog="python -m lilicorr.serve.run")
    p.add_argument("target")
    p.add_argument("--speculative-config", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--load-policy", action=argparse.BooleanOptionalAction, default=False)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    spec = json.loads(a.speculative_config) if a.speculative_config else None
    app, _ = build(a.target, spec, a.served_model_name, a.max_num_seqs, load_policy=a.load_policy)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
