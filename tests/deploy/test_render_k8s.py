"""scripts/render_k8s.py: the kustomize subset it renders (resources, JSON patches by target, the
legacy order), and the rest refused with words rather than skipped."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tests._scripts import load_script

pytestmark = pytest.mark.unit

render_k8s = load_script("render_k8s")
RenderError = render_k8s.RenderError

DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}}}}


def write(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return directory


def kustomization(*, resources: list[str], patches: list[dict] | None = None, **extra) -> str:
    body = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": resources}
    return yaml.safe_dump(body | ({"patches": patches} if patches else {}) | extra)


def test_json_patch_adds_inserts_replaces_removes_and_tests() -> None:
    patched = render_k8s.apply_json_patch(DEPLOYMENT, [
        {"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "a"},
        {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "Z", "value": "3"}},
        {"op": "add", "path": "/spec/template/spec/containers/0/env/1", "value": {"name": "Y", "value": "2"}},
        {"op": "replace", "path": "/spec/template/spec/containers/0/env/0/value", "value": "one"},
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"nvidia.com/gpu.present": "true"}},
        {"op": "remove", "path": "/spec/template/spec/nodeSelector/nvidia.com~1gpu.present"},
    ])
    spec = patched["spec"]["template"]["spec"]
    assert spec["containers"][0]["env"] == [{"name": "X", "value": "one"}, {"name": "Y", "value": "2"},
                                            {"name": "Z", "value": "3"}]
    assert spec["nodeSelector"] == {}
    assert DEPLOYMENT["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "X", "value": "1"}], \
        "the input is left as it was"


@pytest.mark.parametrize(("operation", "words"), [
    ({"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "b"}, "test of"),
    ({"op": "replace", "path": "/spec/replicas", "value": 2}, "no 'replicas'"),
    ({"op": "remove", "path": "/spec/template/spec/containers/1"}, "past the end"),
    ({"op": "add", "path": "/spec/template/spec/containers/2", "value": {}}, "past the end"),
    ({"op": "add", "path": "/spec/template/spec/containers/x", "value": {}}, "not a list index"),
    ({"op": "move", "from": "/a", "path": "/b"}, "op must be"),
    ({"op": "replace", "path": "spec"}, "needs a value"),
    ({"op": "replace", "path": "spec", "value": 1}, "not a JSON pointer"),
])
def test_a_json_patch_that_does_not_fit_is_refused(operation, words) -> None:
    with pytest.raises(RenderError, match=words):
        render_k8s.apply_json_patch(DEPLOYMENT, [operation])


def test_an_overlay_patches_its_bases_resources_by_kind_and_name(tmp_path) -> None:
    write(tmp_path, {
        "base/kustomization.yaml": kustomization(resources=["app.yaml"]),
        "base/app.yaml": yaml.safe_dump_all([DEPLOYMENT, DEPLOYMENT | {"metadata": {"name": "api"}},
                                             {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}]),
        "overlay/kustomization.yaml": kustomization(resources=["../base"], patches=[
            {"path": "replicas.yaml", "target": {"kind": "Deployment", "name": "web"}}]),
        "overlay/replicas.yaml": "- {op: add, path: /spec/replicas, value: 3}\n",
    })
    docs = render_k8s.render(tmp_path / "overlay")
    assert [render_k8s.describe(doc) for doc in docs] == ["Service/web", "Deployment/api", "Deployment/web"]
    assert [doc["spec"].get("replicas") for doc in docs[1:]] == [None, 3]


@pytest.mark.parametrize(("files", "words"), [
    ({"kustomization.yaml": kustomization(resources=["a.yaml"], namePrefix="x-")}, "namePrefix not supported"),
    ({"kustomization.yaml": kustomization(resources=["a.yaml", "a.yaml"])}, "listed twice"),
    ({"kustomization.yaml": kustomization(resources=["missing.yaml"])}, "neither a file nor a directory"),
    ({"kustomization.yaml": kustomization(resources=["a.yaml"], patches=[
        {"patch": "- {op: add, path: /spec/x, value: 1}", "target": {"kind": "Deployment", "name": "other"}}])},
     "selects no resource"),
    ({"kustomization.yaml": kustomization(resources=["a.yaml"], patches=[
        {"patch": "spec: {replicas: 2}", "target": {"kind": "Deployment", "name": "web"}}])},
     "not strategic-merge patches"),
    ({"kustomization.yaml": kustomization(resources=["a.yaml"], patches=[
        {"patch": "[]", "target": {"kind": "Deployment", "name": "web-.*"}}])}, "not a pattern"),
    ({"kustomization.yaml": kustomization(resources=["a.yaml"], patches=[
        {"patch": "[]", "target": {"kind": "Deployment", "labelSelector": "a=b"}}])}, "labelSelector not supported"),
])
def test_what_the_renderer_does_not_do_is_an_error(tmp_path, files, words) -> None:
    write(tmp_path, {"a.yaml": yaml.safe_dump(DEPLOYMENT), **files})
    with pytest.raises(RenderError, match=words):
        render_k8s.render(tmp_path)


def test_the_command_line_prints_the_render_or_the_error(tmp_path, capsys) -> None:
    write(tmp_path, {"kustomization.yaml": kustomization(resources=["a.yaml"]), "a.yaml": yaml.safe_dump(DEPLOYMENT)})
    assert render_k8s.main([str(tmp_path)]) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == [DEPLOYMENT]
    assert render_k8s.main([str(tmp_path / "nowhere")]) == 1
    assert "no kustomization.yaml" in capsys.readouterr().err
