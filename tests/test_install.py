"""What each install pulls in, resolved by pip into an empty environment (`pip install --dry-run --report`):
the schema package and the client need pydantic and httpx only, the serve extra carries no development
tools, `make serve` installs the serve extra, and torch is pinned alike in pyproject.toml and the Makefile."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DEV_ONLY = {"pytest", "pytest-xdist", "ruff", "hypothesis", "transformers", "schemathesis", "playwright", "outlines"}
MODEL = {"torch", "numpy", "triton", "scikit-learn", "safetensors", "tokenizers"}


def resolve(*requirements: str, tmp_path: Path) -> dict[str, str]:
    """{name: version} pip would install for `requirements` into an empty environment."""
    report = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
         str(report), *requirements],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    installs = json.loads(report.read_text())["install"]
    return {_canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in installs}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pip")


def test_the_schema_package_and_the_client_need_only_pydantic_and_httpx(tmp):
    assert set(resolve(".", tmp_path=tmp)) - {"jev"} == set(resolve("pydantic>=2.12", tmp_path=tmp))
    client = resolve(".[client]", tmp_path=tmp)
    assert set(client) - {"jev"} == set(resolve("pydantic>=2.12", "httpx>=0.27", tmp_path=tmp))
    assert not MODEL & set(client), "the client must not pull the model's dependencies"


def test_the_serve_extra_has_the_model_and_no_development_tools(tmp):
    serve = resolve(".[serve]", tmp_path=tmp)
    assert serve["torch"].split("+")[0] == _torch_pin()
    assert {"litestar", "swagger-ui-bundle-v2", "gguf", "scikit-learn"} <= set(serve)
    assert not (DEV_ONLY | {"matplotlib"}) & set(serve), sorted((DEV_ONLY | {"matplotlib"}) & set(serve))


def _torch_pin() -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [r.removeprefix("torch==") for r in extras["model"] if r.startswith("torch")]
    return pin


def test_torch_is_pinned_alike_in_pyproject_the_makefile_and_the_readme():
    makefile = (ROOT / "Makefile").read_text()
    (make_pin,) = re.findall(r"^TORCH\s*:=\s*torch==(\S+)$", makefile, flags=re.MULTILINE)
    assert make_pin == _torch_pin()
    assert f"torch=={make_pin}" in (ROOT / "README.md").read_text()


def _make_dry_run(target: str, tmp_path: Path) -> str:
    done = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_serve_installs_the_serve_extra_and_make_test_the_dev_extras(tmp_path):
    serve = _make_dry_run("serve", tmp_path)
    assert "-m venv" in serve and "install --quiet -e '.[serve]'" in serve and "[dev]" not in serve
    assert serve.index("torch==") < serve.index("'.[serve]'"), "torch is installed first, pinned"
    test = _make_dry_run("test", tmp_path)
    assert "install --quiet -e '.[dev]'" in test and "pytest" in test
