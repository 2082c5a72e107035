"""The figures `scripts/lerobot/train_compare.py` reports, computed from lerobot's log lines.

The comparison itself runs in lerobot's environment and takes minutes (not part of `make test`); what it
derives from the logs is pure and checked here: which steps count, start-up, the loss tail, the ratios
and the loss gaps.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parent.parent / "scripts" / "lerobot"))
from train_compare import case_summary, run_stats  # noqa: E402
from train_runs import parse_steps, run  # noqa: E402

# lerobot 0.6.1's per-step line (lerobot_train.py logs its MetricsTracker), tqdm's bar in front of it.
LINE = (
    "Training:  10%|#| 1/10 [00:09<01:28,  9.86s/step]INFO 2026-11-26 22:33:03 ot_train.py:641 "
    "step:{step} smpl:8 ep:0 epch:0.01 loss:{loss} grdn:384.850 lr:1.0e-05 updt_s:{updt} "
    "data_s:{data} smp/s:1 l1_loss:1.030 kld_loss:8.947\n"
)


def log(rows: list[tuple[str, float, float, float]]) -> str:
    return "".join(LINE.format(step=s, loss=loss, updt=u, data=d) for s, loss, u, d in rows)


def test_a_run_leaves_the_warmup_out_of_timings_and_averages_the_last_losses() -> None:
    rows = [("1", 9.0, 3.0, 7.0), ("2", 8.0, 1.0, 0.5)] + [(str(i), 2.0, 0.5, 0.1) for i in range(3, 13)]
    rows.append(("1K", 1.0, 0.9, 0.3))  # lerobot writes step 1000 as 1K
    steps = parse_steps(log(rows))
    assert [s[1] for s in steps] == [r[1] for r in rows]  # the total loss, not l1_loss or kld_loss
    stats = run_stats(steps, wall_s=40.0, warmup=2, cpu_s=71.26)
    assert stats["steps"] == 13 and stats["cpu_s"] == 71.3
    assert stats["update_s"] == pytest.approx((10 * 0.5 + 0.9) / 11, abs=1e-4)
    assert stats["data_s"] == pytest.approx((10 * 0.1 + 0.3) / 11, abs=1e-4)
    assert stats["step_s"] == pytest.approx(stats["update_s"] + stats["data_s"], abs=2e-4)
    assert stats["step_s_median"] == pytest.approx(0.6)
    assert stats["startup_s"] == pytest.approx(40.0 - (10.0 + 1.5 + 10 * 0.6 + 1.2), abs=0.05)
    assert stats["loss_last"] == 1.0
    assert stats["loss_tail"] == pytest.approx((9 * 2.0 + 1.0) / 10)


def test_a_run_with_no_step_past_the_warmup_is_refused() -> None:
    steps = parse_steps(log([("1", 9.0, 3.0, 7.0), ("2", 8.0, 1.0, 0.5)]))
    with pytest.raises(ValueError, match=r"Invalid run \(2 steps logged\)\. Expected more than 2"):
        run_stats(steps, wall_s=10.0, warmup=2)


def figures(step_s: float, data_s: float, wall_s: float, loss: float) -> dict[str, float]:
    return {
        "step_s": step_s,
        "step_s_median": step_s,
        "update_s": step_s - data_s,
        "data_s": data_s,
        "wall_s": wall_s,
        "cpu_s": 1.5 * wall_s,
        "startup_s": 5.0,
        "loss_tail": loss,
    }


def test_a_case_gives_ratios_of_the_round_means_and_the_seed_yardstick() -> None:
    lerobot = [figures(1.0, 0.1, 60.0, 2.0), figures(1.2, 0.3, 80.0, 2.2)]
    lrs = [figures(0.9, 0.05, 50.0, 2.1), figures(0.9, 0.05, 70.0, 2.2)]
    summary = case_summary(lerobot, lrs)
    assert summary["lerobot-train"]["step_s"] == pytest.approx(1.1)
    ratios = summary["lrs_over_lerobot"]
    assert ratios["step_s"] == pytest.approx(0.9 / 1.1, abs=1e-3)
    assert ratios["data_s"] == pytest.approx(0.05 / 0.2, abs=1e-3)
    assert ratios["wall_s"] == pytest.approx(60.0 / 70.0, abs=1e-3)
    assert ratios["cpu_s"] == pytest.approx(60.0 / 70.0, abs=1e-3)
    assert summary["step_s_median_by_round"] == [0.9, 0.75]
    # Gaps as fractions of the two losses' mean: seed 1 lrs 2.1 against lerobot 2.0, seed 2 equal.
    assert summary["loss_gap_same_seed"] == pytest.approx((0.1 / 2.05 + 0.0) / 2, abs=1e-4)
    assert summary["loss_gap_lerobot_seeds"] == pytest.approx(0.2 / 2.1, abs=1e-4)
    assert summary["loss_gap_lrs_seeds"] == pytest.approx(0.1 / 2.15, abs=1e-4)


def test_one_round_has_no_seed_yardstick_and_unequal_rounds_are_refused() -> None:
    one = case_summary([figures(1.0, 0.1, 60.0, 2.0)], [figures(1.0, 0.1, 60.0, 2.0)])
    assert one["loss_gap_lerobot_seeds"] is None and one["loss_gap_same_seed"] == 0.0
    with pytest.raises(ValueError, match=r"Invalid rounds \(1 lerobot, 0 lrs\)"):
        case_summary([figures(1.0, 0.1, 60.0, 2.0)], [])


def test_a_run_counts_the_cpu_of_every_process_it_started(tmp_path: Path) -> None:
    spin = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
    # The child spins, and so does a grandchild it starts and waits for (a DataLoader worker's place).
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {spin!r}], check=True)\n{spin}"
    result = run("spin", [sys.executable, "-c", code], tmp_path)
    assert result["cpu_s"] >= 0.7 and result["steps"] == []
