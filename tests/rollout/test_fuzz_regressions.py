"""Regressions found by fuzzing the live Rollout (tests/chaos/test_fuzz_rpcs.py): bad input is
INVALID_ARGUMENT naming the field, never UNKNOWN, a worker that allocates until the machine runs
out of memory (sampling.n = 2^31 - 1 did), or NaN logits."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from opentinker_api.common.v1 import datum_pb2, model_pb2, sampling_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_rollout import convert
from opentinker_rollout.errors import InvalidArgument
from tests.rollout._servers import with_servers

PROMPT = pb.Prompt(tokens=datum_pb2.TokenSequence(tokens=[1, 2, 3]))


def field_of(error: pytest.ExceptionInfo[InvalidArgument]) -> str:
    return error.value.field


@pytest.mark.parametrize("params, field", [
    ({"temperature": math.nan}, "sampling.temperature"),
    ({"temperature": math.inf}, "sampling.temperature"),
    ({"n": 2**31 - 1}, "sampling.n"),
    ({"n": -1}, "sampling.n"),
    ({"top_p": math.nan}, "sampling.top_p"),
])
def test_sampling_params_must_be_finite_and_bounded(params: dict, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        convert.sampling_config(sampling_pb2.SamplingParams(**params))
    assert field_of(refused) == field


def test_one_sample_call_queues_at_most_max_sample_rows_completions() -> None:
    many_samples = pb.SampleRequest(prompts=[PROMPT] * 65, sampling=sampling_pb2.SamplingParams(n=1024))
    with pytest.raises(InvalidArgument) as refused:
        convert.prompts(many_samples)
    assert field_of(refused) == "sampling.n"
    with pytest.raises(InvalidArgument) as refused:
        convert.prompts(pb.SampleRequest(prompts=[PROMPT] * (convert.MAX_PROMPTS + 1)))
    assert field_of(refused) == "prompts"
    at_the_bound = pb.SampleRequest(prompts=[PROMPT] * 64, sampling=sampling_pb2.SamplingParams(n=1024))
    assert len(convert.prompts(at_the_bound)) == 64


def test_run_episodes_bounds_group_size_and_episode_specs() -> None:
    spec = pb.EpisodeSpec(group_id="g")
    with pytest.raises(InvalidArgument) as refused:
        convert.episode_specs(pb.RunEpisodesRequest(episodes=[spec], group_size=2**31 - 1))
    assert field_of(refused) == "group_size"
    with pytest.raises(InvalidArgument) as refused:
        convert.episode_specs(pb.RunEpisodesRequest(episodes=[spec] * (convert.MAX_EPISODE_SPECS + 1)))
    assert field_of(refused) == "episodes"
    assert len(convert.episode_specs(pb.RunEpisodesRequest(episodes=[spec] * 4, group_size=1024))) == 4


def test_configs_and_reset_kwargs_with_nan_are_invalid_not_a_json_error() -> None:
    request = pb.RunEpisodesRequest(episodes=[pb.EpisodeSpec(group_id="g"), pb.EpisodeSpec(group_id="h")])
    request.episodes[1].reset_kwargs.update({"start": math.nan})
    with pytest.raises(InvalidArgument) as refused:
        convert.episode_specs(request)
    assert field_of(refused) == "episodes[1].reset_kwargs"
    request = pb.RunEpisodesRequest(episodes=[pb.EpisodeSpec(group_id="g")])
    request.environment.config.update({"nested": {"list": [1, math.inf]}})
    with pytest.raises(InvalidArgument) as refused:
        convert.episode_specs(request)
    assert field_of(refused) == "environment.config"


@pytest.mark.parametrize("path, field", [
    ("a" * 300, "model.local.path"),  # one name longer than NAME_MAX: os.stat raised OSError -> UNKNOWN
    ("/tmp/" + "b/" * 2100, "model.local.path"),  # longer than PATH_MAX
])
def test_a_local_model_path_the_filesystem_cannot_look_up_is_invalid(path: str, field: str) -> None:
    request = pb.LoadModelRequest(model=model_pb2.ModelReference(local=model_pb2.LocalModel(path=path)))
    with pytest.raises(InvalidArgument) as refused:
        convert.load_request(request)
    assert field_of(refused) == field


@pytest.mark.parametrize("overrides, field", [
    ({"adaptation": model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=1 << 20))}, "adaptation.lora.rank"),
    ({"max_batch_size": 2**31 - 1}, "max_batch_size"),
])
def test_load_model_bounds_what_it_allocates(overrides: dict, field: str) -> None:
    model = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama"))
    with pytest.raises(InvalidArgument) as refused:
        convert.load_request(pb.LoadModelRequest(model=model, **overrides))
    assert field_of(refused) == field


def test_update_weights_without_a_policy_id_names_the_target_field(tmp_path) -> None:
    async def scenario(stub, game):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.UpdateWeights(iter([pb.UpdateWeightsRequest(target=pb.UpdateWeightsTarget())]))
        return refused.value

    error = asyncio.run(with_servers(scenario, tmp_path))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("target.policy_id: ")
