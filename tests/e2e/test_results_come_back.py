"""A tenant gets its results back through the API: the completions of each step, the final PEFT
adapter (loaded by plain peft in a process that cannot import OpenTinker), and nothing of another
tenant's."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from opentinker_api.common.v1 import trajectory_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import NotFound, SchedulerClient
from opentinker.client.async_client import AsyncSchedulerClient
from harness.job_specs import builtin_model, lora, rl_spec, sft_spec
from harness.stack import LocalStack
from tests.e2e._helpers import cli

LORA_SEED = 3
PLAIN_PEFT = r"""
import importlib.abc, json, sys

class NoOpenTinker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith("opentinker"):
            raise ImportError(f"this process may not import {name}")
        return None

sys.meta_path.insert(0, NoOpenTinker())
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

try:
    import opentinker  # noqa: F401
    sys.exit("opentinker was importable")
except ImportError:
    pass
base_dir, adapter_dir = sys.argv[1], sys.argv[2]
base = AutoModelForCausalLM.from_pretrained(base_dir)
ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
with torch.no_grad():
    before = base(ids).logits
model = PeftModel.from_pretrained(base, adapter_dir)
with torch.no_grad():
    after = model(ids).logits
lora_b = [p.abs().max().item() for n, p in model.named_parameters() if "lora_B" in n]
from safetensors.torch import load_file
saved = load_file(f"{adapter_dir}/adapter_model.safetensors")
loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
same = sum(any(torch.equal(t, p) for p in loaded.values()) for t in saved.values())
print(json.dumps({"adapters": len(lora_b), "max_lora_b": max(lora_b), "changed": (after - before).abs().max().item(),
                  "saved": len(saved), "loaded_as_saved": same}))
"""


def lora_spec() -> dict:
    return rl_spec(2, name="results-come-back", model=builtin_model(seed=LORA_SEED), adaptation=lora(4, 8),
                   learning_rate=0.05, batch_size=3, eval_every_steps=2, checkpoint_every_steps=None)


@pytest.fixture(scope="module")
def tenants(stack: LocalStack) -> dict[str, str]:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key) as admin:
        return {name: admin.create_tenant(name).api_key_secret for name in ("results-a", "results-b")}


@pytest.fixture(scope="module")
def finished_sft(stack: LocalStack, tenants: dict[str, str]) -> job_pb2.Job:
    """A LoRA SFT job of tenant results-a on a dataset in its own area (cross-entropy: its adapter
    surely moves, where an RL step of a random model may see equal rewards and no gradient)."""
    datasets = stack.state_dir / "tenants" / "results-a" / "datasets"
    datasets.mkdir(parents=True, exist_ok=True)
    (datasets / "chats.jsonl").write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"{a}+1="}, {"role": "assistant", "content": str(a + 1)}]}) + "\n"
        for a in range(6)))
    spec = sft_spec("chats.jsonl", total_steps=2, batch_size=3, name="adapter-to-download",
                    model=builtin_model(seed=LORA_SEED), adaptation=lora(4, 8), learning_rate=0.01)
    with SchedulerClient(stack.address("scheduler"), api_key=tenants["results-a"]) as client:
        job = client.wait(client.submit_job(spec).job_id)
    assert job.state == job_pb2.Job.STATE_SUCCEEDED, job.status_message
    return job


@pytest.fixture(scope="module")
def finished_job(stack: LocalStack, tenants: dict[str, str]) -> job_pb2.Job:
    with SchedulerClient(stack.address("scheduler"), api_key=tenants["results-a"]) as client:
        job = client.wait(client.submit_job(lora_spec()).job_id)
    assert job.state == job_pb2.Job.STATE_SUCCEEDED, job.status_message
    return job


def test_each_step_shows_what_the_model_answered(stack: LocalStack, tenants: dict[str, str],
                                                 finished_job: job_pb2.Job) -> None:
    with SchedulerClient(stack.address("scheduler"), api_key=tenants["results-a"]) as client:
        every = client.list_samples(finished_job.job_id, limit=200)
        train_steps = sorted(s.step for s in every if s.split == "train")
        assert train_steps == [1, 2]  # numbered like the metrics their rewards are in
        assert {s.step for s in every if s.split == "eval"} == {0, 2}  # the baseline and the final evaluation
        for report in every:
            assert 1 <= len(report.samples) <= 4
            for sample in report.samples:
                assert sample.prompt and sample.turns and sample.turns[0].action is not None
                assert sample.stop_reason != trajectory_pb2.STOP_REASON_UNSPECIFIED
        train = next(s for s in every if s.split == "train")
        assert len({sample.group_id for sample in train.samples}) == min(3, len(train.samples))  # distinct problems first
        only_step_2 = client.list_samples(finished_job.job_id, step=2, split="train")
        assert [(s.step, s.split) for s in only_step_2] == [(2, "train")]
        with pytest.raises(NotFound):
            SchedulerClient(stack.address("scheduler"), api_key=tenants["results-b"]).list_samples(finished_job.job_id)

    shown = cli(stack, tenants["results-a"], "jobs", "samples", finished_job.job_id, "--split", "train")
    assert shown.returncode == 0, shown.stderr
    assert "== step 2 train" in shown.stdout and "prompt:" in shown.stdout and "reply 1" in shown.stdout


def test_a_tenant_downloads_its_final_adapter_and_plain_peft_loads_it(stack: LocalStack, tenants: dict[str, str],
                                                                      finished_sft: job_pb2.Job,
                                                                      tmp_path: Path) -> None:
    finished_job = finished_sft
    from opentinker_runtime.ml.models import save_builtin_as_local

    listed = cli(stack, tenants["results-a"], "jobs", "artifacts", finished_job.job_id, "--json")
    assert listed.returncode == 0, listed.stderr
    artifacts = {a["artifact_id"]: a for a in json.loads(listed.stdout)}
    final = artifacts[f"{finished_job.job_id}-final"]
    assert final["format"] == "peft_adapter" and final["loadable_dirs"] == ["adapter"]
    assert f"{finished_job.job_id}/metrics.jsonl" in artifacts

    adapter_dir = tmp_path / "adapter"
    fetched = cli(stack, tenants["results-a"], "download", final["artifact_id"], "--path", "adapter",
                  "-o", str(adapter_dir))
    assert fetched.returncode == 0, fetched.stderr
    assert (adapter_dir / "adapter_config.json").is_file() and "SHA-256 checked" in fetched.stdout
    base_dir = save_builtin_as_local("tiny-qwen2", LORA_SEED, tmp_path / "base")
    loaded = subprocess.run([sys.executable, "-I", "-c", PLAIN_PEFT, str(base_dir), str(adapter_dir)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    result = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert result["adapters"] > 0 and result["max_lora_b"] > 0  # trained: B starts at zero
    assert result["saved"] == result["loaded_as_saved"] > 0  # every saved tensor is in the model
    assert result["changed"] > 0

    metrics = cli(stack, tenants["results-a"], "download", f"{finished_job.job_id}/metrics.jsonl",
                  "-o", str(tmp_path / "metrics"))
    assert metrics.returncode == 0, metrics.stderr
    rows = [json.loads(line) for line in (tmp_path / "metrics" / "metrics.jsonl").read_text().splitlines()]
    assert {row["step"] for row in rows if "loss" in row} == {1, 2}

    async def with_await() -> tuple[list, list[Path]]:
        async with AsyncSchedulerClient(stack.address("scheduler"), api_key=tenants["results-a"]) as client:
            listed_async = [a.artifact_id async for a in client.list_artifacts(finished_job.job_id)]
            return listed_async, await client.download_artifact(final["artifact_id"], tmp_path / "async",
                                                                  path_prefix="adapter")
    listed_async, written = asyncio.run(with_await())
    assert listed_async == list(artifacts)
    assert sorted(p.name for p in written) == sorted(p.name for p in adapter_dir.iterdir())
    assert all(p.read_bytes() == (adapter_dir / p.name).read_bytes() for p in written)

    stolen = cli(stack, tenants["results-b"], "download", final["artifact_id"], "-o", str(tmp_path / "stolen"))
    assert stolen.returncode != 0 and "not found" in stolen.stderr.lower()
    assert not (tmp_path / "stolen").exists() or not any((tmp_path / "stolen").rglob("*.safetensors"))
    peeked = cli(stack, tenants["results-b"], "jobs", "artifacts", finished_job.job_id)
    assert peeked.returncode != 0 and "not found" in peeked.stderr.lower()
