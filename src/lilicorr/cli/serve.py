"""``lilicorr serve``: the OpenAI-compatible server (vLLM's flags and ``--speculative-config``)."""

from __future__ import annotations

import argparse
import sys

from lilicorr.cli.common import add_runtime_args
from lilicorr.shipped import SHIPPED_DRAFT, SHIPPED_TARGET


def _serve(args: argparse.Namespace) -> int:
    import torch
    import uvicorn

    from lilicorr.decoding.config import read_speculative_config
    from lilicorr.serve.server import build

    torch.set_num_threads(args.threads)
    try:
        spec = read_speculative_config(args.speculative_config)
        app, _loop = build(
            args.target,
            spec,
            args.served_model_name,
            args.max_num_seqs,
            args.max_model_len,
            args.dtype,
            args.device,
            load_policy=args.load_policy,
        )
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def register(sub) -> None:
    from lilicorr.decoding.config import COMMON_KEYS
    from lilicorr.decoding.methods import method_names, option_keys

    s = sub.add_parser("serve", help="OpenAI-compatible server with speculative decoding and /metrics")
    s.add_argument(
        "target",
        nargs="?",
        default=None,
        help=f"target folder (default: {SHIPPED_TARGET} with {SHIPPED_DRAFT} in its default configuration, "
        "lilicorr.decoding.config.default_config)",
    )
    s.add_argument(
        "--speculative-config",
        default=None,
        help='vLLM-style JSON, e.g. \'{"method": "dflash", "model": "models/smollm2-lilicorr"}\' (dflash: the '
        f"folder decides DFlash, LiLiCorr or its comparison arm). Methods: {', '.join(method_names())}; keys: "
        f"{', '.join(COMMON_KEYS)} and the methods' own {', '.join(option_keys())}",
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", default=None)
    s.add_argument("--max-num-seqs", type=int, default=8)
    s.add_argument("--max-model-len", type=int, default=None)
    s.add_argument("--log-level", default="warning")
    s.add_argument(
        "--load-policy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="plan every step's drafts from measured costs and load (decoding/policy.py; the default); "
        "--no-load-policy runs the speculative config exactly as given (what `bench serve --fixed` compares)",
    )
    add_runtime_args(s)
    s.set_defaults(func=_serve)
