"""vLLM's offline engine answering token-id prompts (run by ``VllmAnswerer`` inside the compat venv).

Loads the model, prints ``READY``, then reads jobs as JSON lines on stdin (``index``, ``prompt_ids``,
``temperature``, ``max_tokens``) until it closes, and prints one JSON line per answer, ``{"index",
"ids"}``, in job order. vLLM spawns worker processes, hence the main
guard. Plain sampling (top-k/top-p off); vLLM on CPU refuses per-request seeds, so none are passed.
"""

from __future__ import annotations

import argparse
import json
import sys

from lilicorr.datagen.parent_watch import exit_with_parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=256, help="jobs per generate call (answers stream out per chunk)")
    args = ap.parse_args()
    exit_with_parent()  # a killed `data regenerate` must not leave vLLM's busy engine cores behind
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        enforce_eager=True,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        seed=0,
    )
    print("READY", flush=True)
    jobs = [json.loads(x) for x in sys.stdin if x.strip()]
    for start in range(0, len(jobs), args.chunk):
        chunk = jobs[start : start + args.chunk]
        prompts = [TokensPrompt(prompt_token_ids=j["prompt_ids"]) for j in chunk]
        params = [
            SamplingParams(temperature=j["temperature"], max_tokens=j["max_tokens"])  # defaults: no top-k/p
            for j in chunk
        ]
        for j, out in zip(chunk, llm.generate(prompts, params, use_tqdm=False), strict=True):
            print(json.dumps({"index": j["index"], "ids": list(out.outputs[0].token_ids)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
