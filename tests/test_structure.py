"""The tree's structure: the packages import only what their layer allows, and nothing imports in a
circle (scripts/check_structure.py); the SDK works on a laptop without torch or the runtime."""

import subprocess
import sys
import textwrap
from pathlib import Path

from tests._scripts import REPO_ROOT, load_script

check_structure = load_script("check_structure")


def test_the_tree_has_no_forbidden_import_and_no_circle():
    problems, imports, modules = check_structure.check(REPO_ROOT)
    assert problems == []
    layers = {name.split(".")[0] for name in modules}
    assert {"opentinker_api", "opentinker_env", "opentinker_runtime", "opentinker",
            "opentinker_scheduler", "opentinker_trainer", "opentinker_rollout", "opentinker_envhost",
            "opentinker_coordinator", "opentinker_gateway"} <= layers
    assert len(imports) > 1000  # the checker really read the tree


def write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def planted_tree(root: Path) -> None:
    for package in ("packages/api/opentinker_api", "packages/env/opentinker_env",
                    "packages/runtime/opentinker_runtime", "clients/python/opentinker",
                    "services/alpha/opentinker_alpha", "services/beta/opentinker_beta"):
        write(root, f"{package}/__init__.py")
    write(root, "packages/runtime/opentinker_runtime/uses_sdk.py", "from opentinker import client\n")
    write(root, "clients/python/opentinker/client.py", "import opentinker_runtime.eager\n")
    write(root, "packages/runtime/opentinker_runtime/eager.py")
    write(root, "clients/python/opentinker/lazy.py", "def f():\n    import opentinker_runtime.eager\n")
    write(root, "services/alpha/opentinker_alpha/a.py", "from opentinker_beta import b\nimport opentinker.client\n")
    write(root, "services/beta/opentinker_beta/b.py", "")
    write(root, "services/beta/opentinker_beta/one.py", "from opentinker_beta import two\n")
    write(root, "services/beta/opentinker_beta/two.py", "def f():\n    from . import three\n")
    write(root, "services/beta/opentinker_beta/three.py", "import opentinker_beta.one\n")
    write(root, "services/beta/opentinker_beta/typed.py", textwrap.dedent("""\
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from opentinker_beta import typed_back
        """))
    write(root, "services/beta/opentinker_beta/typed_back.py", "from opentinker_beta import typed\n")


def test_the_checker_finds_each_kind_of_problem(tmp_path):
    planted_tree(tmp_path)
    problems, _, _ = check_structure.check(tmp_path)
    text = "\n".join(problems)
    assert "opentinker_runtime may not import opentinker" in text
    assert "client.py:1: opentinker imports opentinker_runtime at module level" in text
    assert "lazy.py" not in text  # the SDK may use the runtime inside a function
    assert "service opentinker_alpha imports another service, opentinker_beta" in text
    assert "service opentinker_alpha imports the SDK" in text
    assert "circle: opentinker_beta.one -> opentinker_beta.three -> opentinker_beta.two" in text
    assert "typed" not in text  # an import only for type checking makes no circle
    assert len(problems) == 5


def test_the_checker_exits_non_zero_on_a_problem(tmp_path):
    planted_tree(tmp_path)
    script = REPO_ROOT / "scripts" / "check_structure.py"
    bad = subprocess.run([sys.executable, str(script), "--root", str(tmp_path)], capture_output=True, text=True)
    good = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert bad.returncode == 1 and "structure: 5 problem(s)" in bad.stdout
    assert good.returncode == 0 and "structure: OK" in good.stdout


BLOCKER = """
import importlib.abc, sys
BLOCKED = ("torch", "transformers", "opentinker_runtime", "opentinker_scheduler", "opentinker_trainer",
           "opentinker_rollout", "opentinker_envhost", "opentinker_coordinator", "opentinker_gateway")
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked on a laptop: {name}")
sys.meta_path.insert(0, Blocker())
"""


def test_the_sdk_and_the_game_interface_work_without_torch_or_the_runtime():
    program = BLOCKER + textwrap.dedent("""
        import contextlib, io
        from opentinker.client import ServiceClient
        from opentinker.client.spec import SpecError
        from opentinker_env import AbstractGame, StepResult, play
        from opentinker.cli.main import main

        class Echo(AbstractGame):
            def get_system_prompt(self): return "Repeat the word."
            def get_initial_user_message(self): return ""
            def reset(self, word="hi"): self.word = word; return word
            def step(self, action): return StepResult(reward=float(action == self.word), done=True)

        assert play(Echo(), ["hi"]).total_reward == 1.0
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(["--help"])
        assert "run" in out.getvalue(), out.getvalue()
        print("laptop ok")
        """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert "laptop ok" in result.stdout
