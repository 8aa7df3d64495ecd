"""Report tables computed from a results dict: ratios, oracle headroom, sweep speedups."""

from lilicorr.bench.report import derived_table, sweep_speedup_table, tier_table
from lilicorr.bench.runner import markdown_table


def _run(name, method, t, tau, cats=None):
    return {
        "arm": {"name": name, "method": method},
        "temperature": t,
        "pooled": {"tau": tau},
        "tau_mean_per_request": tau,
        "tau_by_category": cats or {"code": tau},
        "tau_by_tier": {"low": tau, "high": tau + 0.1},
        "tokens_per_s": 10.0,
        "head_walk_share": 0.1,
    }


RESULTS = {
    "runs": [
        _run("ar", "ar", 0.0, 1.0),
        _run("df", "dflash", 0.0, 1.5),
        _run("lc", "lilicorr", 0.0, 1.8, {"code": 1.7, "long": 1.9}),
        _run("lc:top1", "dflash", 0.0, 1.6),
        _run("lc:oracle", "oracle", 0.0, 2.6),
        _run("lc@n3", "lilicorr", 0.0, 1.4),
        _run("lc:top1@n3", "dflash", 0.0, 1.3),
        _run("lc:oracle@n3", "oracle", 0.0, 1.7),
        _run("df", "dflash", 1.0, 1.2),
        _run("lc", "lilicorr", 1.0, 1.3),
    ],
    "sweep": [
        {"arm": a, "tier": tier, "input_len": 64, "concurrency": 1, "tokens_per_s": v}
        for a, tier, v in [("ar", "low", 100), ("ar", "high", 100), ("lc", "low", 50), ("lc", "high", 200)]
    ],
}


def test_derived_ratio_and_headroom():
    rows = {
        tuple(c.strip() for c in line.split("|")[1:3]): line for line in derived_table(RESULTS, ["df"]).splitlines()
    }
    assert "| 1.200 |" in rows[("0", "lc")]  # 1.8 / 1.5
    assert "| 20 % |" in rows[("0", "lc")]  # (1.8 − 1.6) / (2.6 − 1.6)
    assert "| 1.083 |" in rows[("1", "lc")]  # 1.3 / 1.2; no headroom at T=1
    assert ("0", "lc:oracle") not in rows and ("0", "ar") not in rows
    assert "| 25 % |" in rows[("0", "lc@n3")]  # (1.4 − 1.3) / (1.7 − 1.3), its own length's arms


def test_category_columns_follow_the_data():
    table = markdown_table(RESULTS)
    assert "τ code | τ long |" in table
    assert "| 1.700 | 1.900 |" in table and "| nan |" in table  # df has no long prompts


def test_sweep_speedup_geometric_mean_over_tiers():
    assert "| 64 | 1 | 1.00× |" in sweep_speedup_table(RESULTS)  # sqrt(0.5 · 2.0)
    assert "τ low entropy" in tier_table(RESULTS)
