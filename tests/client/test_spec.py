from pathlib import Path

import pytest

from opentinker_api.common.v1 import algorithm_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client.spec import SpecError, job_spec_from_dict, load_job_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def test_enum_short_names_expand_to_their_prefixed_values():
    spec = job_spec_from_dict({"type": "RL", "policy": {"algorithm": {"loss": {"function": "PPO_CLIP",
                                                                                "kl_estimator": "k3"}}}})
    assert spec.type == job_pb2.JOB_TYPE_RL
    assert spec.policy.algorithm.loss.function == algorithm_pb2.LOSS_FUNCTION_PPO_CLIP
    assert spec.policy.algorithm.loss.kl_estimator == algorithm_pb2.KL_ESTIMATOR_K3


def test_a_session_spec_parses_with_its_short_type_name():
    spec = job_spec_from_dict({"type": "SESSION", "policy": {"model": {"builtin": {"name": "tiny-llama"}},
                                                             "adaptation": {"lora": {"rank": 8}}}})
    assert spec.type == job_pb2.JOB_TYPE_SESSION and spec.policy.adaptation.lora.rank == 8


def test_full_enum_names_and_nested_configs_pass_through():
    spec = job_spec_from_dict({"type": "JOB_TYPE_SFT", "environment": {"config": {"a": {"b": [1, 2]}}}})
    assert spec.type == job_pb2.JOB_TYPE_SFT
    assert spec.environment.config["a"]["b"][1] == 2


@pytest.mark.parametrize("data, message", [
    ({"training": {"group_sise": 3}}, r"spec\.training\.group_sise: unknown field"),
    ({"type": "RLX"}, r"spec\.type: 'RLX' is not one of RL, SFT, INFERENCE, SESSION$"),
    ({"training": 5}, r"spec\.training: expected a mapping"),
    ({"training": {"total_steps": "x"}}, r"total_steps"),
    ({"resources": [{"role": "GPU"}]}, r"spec\.resources\[0\]\.role: 'GPU' is not one of"),
])
def test_bad_specs_name_the_field(data, message):
    with pytest.raises(SpecError, match=message):
        job_spec_from_dict(data)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_job_files_parse(path):
    spec = load_job_spec(path)
    assert spec.type == job_pb2.JOB_TYPE_RL and spec.training.total_steps > 0


def test_yaml_with_a_spec_key_is_accepted(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("spec:\n  type: SFT\n  dataset: {path: /data/x.jsonl}\n")
    assert load_job_spec(path).dataset.path == "/data/x.jsonl"
