"""bench/rl_step_vs_trl.py's report without a stack: one row and one ratio per max_staleness k
against the same TRL runs, CPU s per step by process, a k the stack refused, the job spec per k."""

from __future__ import annotations

import pytest

from tests._bench import load_bench


def side(wall_s: float, cpu: dict[str, float]) -> dict:
    return {"median": {"wall_s": wall_s, "rollout_s": wall_s / 2, "update_s": wall_s / 3,
                       "weight_sync_s": 0.01, "generated_tokens": 1000.0},
            "timed_steps": 4, "cpu_s_per_step": cpu, "cpu_s_per_step_total": sum(cpu.values()), "runs": []}


OURS_CPU = {"redis": 0.01, "scheduler": 0.06, "trainer": 0.62, "rollout": 0.78, "envhost": 0.21,
            "coordinator": 0.07}


@pytest.fixture(scope="module")
def bench():
    return load_bench("rl_step_vs_trl")


def test_each_k_gets_its_ratio_against_the_same_trl_runs_and_a_refused_k_is_shown(bench):
    config = bench.parse_args(["--max-staleness", "0", "1", "2"])
    results = {"trl": side(0.5, {"bench process": 1.07}), "load_before": "", "load_after": ""}
    bench.add_ours(results, {"0": {"max_staleness": 0, **side(1.0, OURS_CPU)},
                             "1": {"max_staleness": 1, **side(0.4, OURS_CPU)},
                             "2": {"max_staleness": 2, "refused": "INVALID_ARGUMENT: no"}})
    assert results["ratios"] == {"0": 2.0, "1": 0.8}
    assert results["ratio"] == 2.0 and results["ours"]["max_staleness"] == 0
    assert bench.ratio_line(results) == "ratio ours/TRL step time: k=0 2.00x, k=1 0.80x (target: k=1 <= 0.8x)"
    header, k0, k1, k2, trl = bench.table_lines(results, config)
    assert header.split()[-4:] == ["trainer", "rollout", "envhost", "rest"]
    assert k0.split()[:2] == ["ours", "k=0"] and k0.split()[-5:] == ["1.75", "0.62", "0.78", "0.21", "0.14"]
    assert k1.split()[:3] == ["ours", "k=1", "0.400"]
    assert k2.split()[:3] == ["ours", "k=2", "refused:"]
    assert trl.split()[-5:] == ["1.07", "-", "-", "-", "-"]


def test_the_job_spec_names_its_max_staleness(bench):
    config = bench.parse_args([])
    assert config.max_staleness == (0,)
    assert bench.rl_spec(config, 1)["async"] == {"max_staleness": 1}
    assert bench.parse_args(["--max-staleness", "1", "1", "0"]).max_staleness == (1, 0)
    with pytest.raises(SystemExit):
        bench.parse_args(["--max-staleness", "-1"])


def test_service_threads_reach_the_private_stack_as_settings(bench, monkeypatch):
    calls = []
    monkeypatch.setattr(bench.subprocess, "run", lambda args, **kw: calls.append(kw.get("env")) or
                        (_ for _ in ()).throw(RuntimeError("stop here")))
    config = bench.parse_args(["--trainer-threads", "2", "--rollout-threads", "1"])
    with pytest.raises(RuntimeError), bench.private_stack(config):
        pass
    env = calls[0]
    assert env["OPENTINKER_TRAINER_TORCH_THREADS"] == "2" and env["OPENTINKER_ROLLOUT_TORCH_THREADS"] == "1"
