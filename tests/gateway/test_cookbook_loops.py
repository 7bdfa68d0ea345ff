"""tinker-cookbook's own loops, unchanged, against the gateway (issue 25).

`tinker_cookbook.supervised.train` on a local JSONL conversation file and `tinker_cookbook.rl.train`
with an Env of the cookbook's Env API (tests/gateway/cookbook_loops.py builds their configs), then
the cookbook's flat recipes `recipes/sl_loop.py` and `rl_loop.py` with one line changed: their
`datasets.load_dataset(...)` reads a local file (our machines cannot reach the Hub). Each runs as
a user runs it, in its own process, configured by environment only: TINKER_BASE_URL and
TINKER_API_KEY for the SDK, HF_ENDPOINT=<gateway>/hf for the cookbook's `get_tokenizer(name)`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

pytest.importorskip("tinker_cookbook", reason="scripts/setup.sh installs tinker-cookbook (requirements/tinker.txt)")

REPO = Path(__file__).resolve().parents[2]
RECIPE_DATA_LINES = {
    "sl_loop": ('datasets.load_dataset("HuggingFaceH4/no_robots")',
                'datasets.load_dataset("json", data_files={"train": "no_robots.jsonl"})'),
    "rl_loop": ('datasets.load_dataset("openai/gsm8k", "main")',
                'datasets.load_dataset("json", data_files={"train": "gsm8k.jsonl"})'),
}
"""Each recipe's one changed line: the Hub data set it loads, and the local file it loads here
(the diff docs/tinker.md shows)."""


@pytest.fixture(scope="module")
def cookbook_env(gateway_stack, tmp_path_factory) -> dict[str, str]:
    return {**os.environ, "TINKER_BASE_URL": gateway_stack.url, "TINKER_API_KEY": f"tml-{gateway_stack.acme_key}",
            "HF_ENDPOINT": f"{gateway_stack.url}/hf", "HF_HOME": str(tmp_path_factory.mktemp("hf-home")),
            "TINKER_TELEMETRY": "0", "PYTHONPATH": str(REPO)}


def run(args: list[str], *, cwd: Path, env: dict[str, str]) -> None:
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


def metrics(log_path: Path) -> list[dict]:
    """The rows the cookbook's ml_log writes to <log_path>/metrics.jsonl, one per step."""
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def addition_conversations(count: int) -> list[dict]:
    """Short Q/A chats in the No Robots shape ({"messages": [...]}): a template to learn."""
    pairs = [(i % 7 + 1, i // 7 + 1) for i in range(count)]
    return [{"messages": [{"role": "user", "content": f"What is {a} plus {b}?"},
                          {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}]} for a, b in pairs]


def gsm8k_problems(count: int) -> list[dict]:
    """Word problems in the GSM8K shape: the answer ends with '#### <number>'."""
    pairs = [(i % 5 + 2, i // 5 + 3) for i in range(count)]
    return [{"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
             "answer": f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"} for a, b in pairs]


def patched_recipe(name: str, directory: Path) -> Path:
    """The installed recipe with only its load_dataset line pointed at a local file."""
    source = Path(importlib.util.find_spec(f"tinker_cookbook.recipes.{name}").origin).read_text()
    hub, local = RECIPE_DATA_LINES[name]
    assert source.count(hub) == 1, f"recipes/{name}.py no longer loads its data with {hub}"
    path = directory / f"{name}.py"
    path.write_text(source.replace(hub, local))
    return path


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_the_cookbook_supervised_loop_on_a_local_conversation_file_lowers_the_nll(cookbook_env, tmp_path):
    data = write_jsonl(tmp_path / "conversations.jsonl", addition_conversations(48))
    log_path = tmp_path / "sl"
    run(["-m", "tests.gateway.cookbook_loops", "sl", "--log-path", str(log_path), "--data", str(data),
         "--batch-size", "8"], cwd=REPO, env=cookbook_env)
    nll = [row["train_mean_nll"] for row in metrics(log_path) if "train_mean_nll" in row]
    assert len(nll) == 6, nll  # one epoch of 48 conversations in batches of 8
    assert mean(nll[-2:]) < 0.8 * mean(nll[:2]), nll
    checkpoints = (log_path / "checkpoints.jsonl").read_text()
    assert "tinker://" in checkpoints and '"final"' in checkpoints


def test_the_cookbook_rl_loop_with_a_cookbook_env_raises_the_reward(cookbook_env, tmp_path):
    log_path = tmp_path / "rl"
    run(["-m", "tests.gateway.cookbook_loops", "rl", "--log-path", str(log_path), "--steps", "10"],
        cwd=REPO, env=cookbook_env)
    reward = [row["env/all/reward/total"] for row in metrics(log_path) if "env/all/reward/total" in row]
    assert len(reward) == 10, reward
    assert mean(reward[-2:]) > mean(reward[:2]) + 0.2, reward  # random weights: ~0.1 lowercase


def test_the_sl_loop_recipe_with_local_data_lowers_the_nll(cookbook_env, tmp_path):
    write_jsonl(tmp_path / "no_robots.jsonl", addition_conversations(48))
    recipe = patched_recipe("sl_loop", tmp_path)
    run([str(recipe), f"base_url={cookbook_env['TINKER_BASE_URL']}", "batch_size=8", "learning_rate=1e-2",
         "save_every=0", f"log_path={tmp_path / 'log'}"], cwd=tmp_path, env=cookbook_env)
    nll = [row["train_mean_nll"] for row in metrics(tmp_path / "log")]
    assert len(nll) == 6, nll
    assert mean(nll[-2:]) < 0.8 * mean(nll[:2]), nll


def test_the_rl_loop_recipe_with_local_data_samples_grades_and_logs_every_step(cookbook_env, tmp_path):
    """A random-weights model never writes \\boxed{N}: the reward stays 0 and the recipe skips its
    optimizer steps (all advantages zero); sampling, grading, logging and checkpoints all run."""
    write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_problems(8))
    recipe = patched_recipe("rl_loop", tmp_path)
    run([str(recipe), f"base_url={cookbook_env['TINKER_BASE_URL']}", "batch_size=4", "group_size=4",
         "max_tokens=16", "loss_fn=importance_sampling", "save_every=0", f"log_path={tmp_path / 'log'}"],
        cwd=tmp_path, env=cookbook_env)
    rows = metrics(tmp_path / "log")
    assert [row["progress/batch"] for row in rows] == [0, 1]
    assert all(0.0 <= row["reward/total"] <= 1.0 for row in rows), rows
    assert '"final"' in (tmp_path / "log" / "checkpoints.jsonl").read_text()


def test_the_rl_loop_recipes_datum_trains(service_client):
    """recipes/rl_loop.py's datum, built as it builds it: its first step with a non-zero advantage."""
    training = service_client.create_lora_training_client(base_model="tiny-llama", rank=4).result()
    prompt, sampled = types.ModelInput.from_ints([85, 115, 101, 114, 58, 32, 97]), [98, 99, 100]
    ob_len = prompt.length - 1
    datum = types.Datum(model_input=prompt.append(types.EncodedTextChunk(tokens=sampled[:-1])),
                        loss_fn_inputs={"target_tokens": [0] * ob_len + sampled,
                                        "logprobs": [0.0] * ob_len + [-5.0] * len(sampled),
                                        "advantages": [0.0] * ob_len + [1.0] * len(sampled)})
    result = training.forward_backward([datum], "importance_sampling").result()
    assert len(result.loss_fn_outputs[0]["logprobs"].tolist()) == datum.model_input.length
    elementwise = result.loss_fn_outputs[0]["elementwise_loss"].to_numpy()
    assert np.all(elementwise[:ob_len] == 0) and np.all(elementwise[ob_len:] != 0)  # the placeholders train nothing
    assert result.metrics["loss:sum"] == pytest.approx(float(elementwise.sum()), rel=1e-5)
    with pytest.raises(tinker.BadRequestError, match="is not model_input"):  # a placeholder that would train
        bad = types.Datum(model_input=datum.model_input, loss_fn_inputs={
            "target_tokens": [0] * ob_len + sampled, "logprobs": [0.0] * ob_len + [-5.0] * len(sampled),
            "advantages": [1.0] * (ob_len + len(sampled))})
        training.forward_backward([bad], "importance_sampling").result()
