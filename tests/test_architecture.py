"""The folders show the architecture (docs/architecture.md, "Layers"): every package is on that page's
tree and every folder of the tree exists; an `__init__.py` only names what its package offers; a
folder of modules stays small enough to read; a sub-package of the layered packages says what it may
import; no module outgrows a reader."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
LAYERED = ("analysis", "cluster", "pipeline", "rmqchaos")  # each with a layers contract over its sub-packages
TOPS = ("cli", "orchestrator", "bench", "pipeline", "chaos", "analysis", "loadgen", "cluster", "rmqclient", "rmqchaos",
        "dags", "airflow_plugins")
MAX_MODULES = 15  # per folder; a registry of one module per kind is exempt
REGISTRIES = {"chaos/kinds"}
MAX_INIT_LINES, MAX_MODULE_LINES = 40, 420


def packages() -> list[Path]:
    return sorted(p.parent for top in TOPS for p in (REPO / top).rglob("__init__.py"))


def tree_folders() -> list[str]:
    """The folders the page's tree draws, as paths ("cluster/net"), from its indentation."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    out, parent = [], ""
    for line in block.splitlines():
        m = re.match(r"^( *)([\w.-]+)/\s", line)
        if not m:
            continue
        if m.group(1):
            out.append(f"{parent}/{m.group(2)}")
        else:
            parent = m.group(2)
            out.append(parent)
    return out


def test_the_tree_on_the_page_is_the_tree_on_disk() -> None:
    drawn = tree_folders()
    assert len(drawn) == len(set(drawn)), sorted(d for d in drawn if drawn.count(d) > 1)
    assert [d for d in drawn if not (REPO / d).is_dir()] == []
    pkgs = {str(p.relative_to(REPO)) for p in packages()}
    assert sorted(pkgs - set(drawn)) == []


@pytest.mark.parametrize("pkg", packages(), ids=lambda p: str(p.relative_to(REPO)))
def test_an_init_only_names_what_its_package_offers(pkg: Path) -> None:
    init = pkg / "__init__.py"
    src = init.read_text()
    assert len(src.splitlines()) <= MAX_INIT_LINES
    tree = ast.parse(src)
    assert ast.get_docstring(tree), "no docstring saying what the package answers"
    code = [n for n in tree.body[1:] if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.Assign) and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["__all__"])]
    assert [ast.unparse(n).splitlines()[0] for n in code] == []


@pytest.mark.parametrize("pkg", packages(), ids=lambda p: str(p.relative_to(REPO)))
def test_a_folder_of_modules_stays_small_or_has_sub_packages(pkg: Path) -> None:
    if str(pkg.relative_to(REPO)) in REGISTRIES:
        return
    modules = [p for p in pkg.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= MAX_MODULES, sorted(p.name for p in modules)


@pytest.mark.parametrize("pkg", [p for p in packages() if p.parent.name in LAYERED and p.parent.parent == REPO],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_a_sub_package_of_a_layered_package_says_what_it_may_import(pkg: Path) -> None:
    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
    assert "May import:" in doc
    contract = (REPO / "pyproject.toml").read_text()
    assert re.search(rf'containers = \["{pkg.parent.name}"\]\nlayers = \[[^\]]*\b{pkg.name}\b', contract), \
        f"{pkg.name} is in no layer of {pkg.parent.name}'s contract"


def test_no_module_outgrows_a_reader() -> None:
    big = {str(p.relative_to(REPO)): n for top in TOPS for p in (REPO / top).rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert big == {}
