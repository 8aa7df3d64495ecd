"""Cost of a drafter's LM head over the whole SmolLM2 vocabulary against its 8 192 most frequent tokens: one
7-slot block, bf16 and fp32 (random weights of the target's shape; the product's cost does not depend on them).

    python benchmarks/draft_head_cost.py
"""

import time

import torch


def main() -> None:
    torch.set_num_threads(2)
    for dt in (torch.bfloat16, torch.float32):
        w = torch.randn(49152, 576, dtype=dt)
        sub, x = w[:8192].clone(), torch.randn(1, 7, 576, dtype=dt)
        for name, m in (("full 49152", w), ("8192", sub)):
            for _ in range(3):
                torch.nn.functional.linear(x, m)
            t0 = time.perf_counter()
            for _ in range(20):
                torch.nn.functional.linear(x, m)
            print(f"{dt} {name}: {(time.perf_counter() - t0) / 20 * 1000:.2f} ms")


if __name__ == "__main__":
    main()
