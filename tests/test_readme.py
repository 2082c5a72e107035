"""The README's and the documentation site's snippets run as written on `lrs sample` data.

The pages are README.md and every page of docs/, in the site's order (mkdocs.yml's `nav`). Every ```bash
block's `lrs` commands and the training ```python blocks are extracted from them and run, each once
(the README repeats a few of the pages' commands: a command or snippet is run once however many pages
show it), with only the places changed: Hub repo ids become a local `lrs sample` dataset, buckets become
`file://` directories, `/local/lrs-cache` a temporary directory. Skipped, and why: lines on `s3://`
(no S3 endpoint here; `tests/reshard/test_push_s3.py` covers S3 against moto), `make` (what CI runs),
`torchrun ... train.py` (no train.py; `tests/reader/test_start_methods.py` runs torchrun), `lrs train`
(lerobot's trainer; `tests/test_lerobot_train.py` runs those lines in lerobot's environment), `lrs prewarm
--spec` (it reads the spec file the training snippet writes: run after that snippet), `sbatch` (the
recipes of scripts/slurm/, which `tests/slurm/` submits to a real SLURM), and the
lerobot ```python block (lerobot cannot live in this environment; `scripts/lerobot/policies.py` runs
the same calls in lerobot's own). Every page is also checked for what it names: imports that a package
declares, repository paths and modules that exist, relative links to files and anchors that exist.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reader import DatasetMeta
from tests.reshard.defects import make_defective

README = Path(__file__).resolve().parent.parent / "README.md"
ROOT = README.parent
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"


def site_pages() -> list[Path]:
    """docs/'s pages in the order of mkdocs.yml's `nav` (the README's order before they moved there)."""
    return [
        DOCS / page for page in re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)$", MKDOCS.read_text(), flags=re.M)
    ]


PAGES = [README, *site_pages()]
LRS = str(Path(sys.executable).with_name("lrs"))
# (README text, what it becomes), in order: longer names first.
PLACES = [
    ("hf://buckets/my-org/aloha-lrs", "file://{w}/bucket/aloha-lrs"),
    ("hf://buckets/me/aloha-lrs", "file://{w}/bucket/aloha-lrs"),
    ("hf://buckets/me/pusht-lrs", "file://{w}/bucket/pusht-lrs"),
    ("hf://buckets/me/my-lrs", "file://{w}/bucket/my-lrs"),
    ("file:///mnt/shared/pusht-lrs", "file://{w}/shared/pusht-lrs"),
    ("file:///mnt/shared/aloha-lrs", "file://{w}/bucket/aloha-lrs"),
    ("lerobot/aloha_sim_insertion_human", "{w}/v3"),
    ("lerobot/pusht", "{w}/v3"),
    ("/data/aloha-lrs", "{w}/data/aloha-lrs"),
    ("/data/koch-v3", "{w}/v3"),
    ("/local/lrs-cache", "{w}/cache"),
]
SKIP = ("s3://", "make ", "torchrun ", "lrs train ", "--spec ", "sbatch ")
# The packages (and subpackages) whose `__all__` the Python API page lists (docs/api/index.md), each with
# its own page docs/api/<package>.md.
API = ("cache", "reader", "reshard", "reshard.verify")


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def blocks(language: str, pages: list[Path] = PAGES) -> list[str]:
    """The ```language blocks of `pages`, in order, each text once (a block two pages show is one block)."""
    found = [
        block
        for page in pages
        for block in re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    ]
    return list(dict.fromkeys(found))


def relocate(text: str, work: Path) -> str:
    for old, new in PLACES:
        text = text.replace(old, new.format(w=work))
    return text


def commands(block: str) -> list[str]:
    """The block's command lines: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = [line.split("  #")[0].split(" # ")[0].strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def imports(text: str) -> dict[str, set[str]]:
    """Every `from X import a, b` of lrs's packages in `text`'s python blocks: X -> {a, b}."""
    found: dict[str, set[str]] = {}
    for block in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        for module, names in re.findall(r"^from ([\w.]+) import ([^#\n]+)", block, flags=re.M):
            if module.split(".")[0] in ("cache", "reader", "reshard"):
                found.setdefault(module, set()).update(n.strip() for n in names.split(","))
    return found


def python_api_section() -> str:
    return (DOCS / "api" / "index.md").read_text()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_the_page_imports_only_what_packages_declare(page: Path) -> None:
    """No snippet documents a deep path: every name it imports is in its module's `__all__`."""
    for module, names in imports(page.read_text()).items():
        declared = getattr(importlib.import_module(module), "__all__", None)
        assert declared is not None, f"{page_id(page)} imports from {module}, which declares no __all__"
        assert names <= set(declared), f"{module} does not export {sorted(names - set(declared))}"


def test_the_python_api_section_lists_every_export() -> None:
    listed = imports(python_api_section())
    assert set(listed) == set(API)
    for module in API:
        exported = importlib.import_module(module).__all__
        assert listed[module] == set(exported), module
        assert all(hasattr(importlib.import_module(module), name) for name in exported), module


def api_page_members(package: str) -> list[str]:
    """The names docs/api/<package>.md asks mkdocstrings to document (its `members:` list)."""
    text = (DOCS / "api" / f"{package}.md").read_text()
    assert f"::: {package}\n" in text, f"docs/api/{package}.md documents no `::: {package}`"
    return re.findall(r"^ {8}- (\w+)$", text.split("members:", 1)[1], flags=re.M)


@pytest.mark.parametrize("package", API)
def test_each_api_page_lists_exactly_its_package_exports(package: str) -> None:
    members = api_page_members(package)
    assert len(members) == len(set(members)), members
    assert set(members) == set(importlib.import_module(package).__all__)


def test_every_site_page_is_in_the_nav() -> None:
    """A page left out of mkdocs.yml's `nav` is built but found by no one (and its snippets not run)."""
    assert sorted(site_pages()) == sorted(DOCS.rglob("*.md"))


@pytest.mark.parametrize("package", API)
def test_no_export_is_shadowed_by_a_submodule(package: str) -> None:
    """`from reshard import verify` would give the module `reshard.verify` once it is imported, not a
    function of that name: an exported name is never a submodule's."""
    path = importlib.import_module(package).__path__
    submodules = {m.name for m in pkgutil.iter_modules(path)}
    assert not submodules & set(importlib.import_module(package).__all__)


OURS = ("cache", "reader", "reshard", "scripts", "tests", "docs")


def stale_names(text: str, root: Path = ROOT) -> list[str]:
    """The repository paths (`reader/format/v3.py`, `scripts/setup.sh`) and module names (`reader.format.v3`,
    `reshard.cli`) that `text` puts in backticks and that do not exist under `root`. A dotted name may end
    in one name the module defines or exports (`reader.format.v3.check_tiling`, `reader.EpisodeStream`)."""
    stale = []
    for token in sorted(set(re.findall(r"`([\w./-]+)`", text))):
        head = re.split(r"[./]", token, maxsplit=1)[0]
        if head not in OURS or token == head:
            continue
        if "/" in token:
            if not (root / token).exists():
                stale.append(token)
        elif not _module_or_member(token, root):
            stale.append(token)
    return stale


def _module_or_member(dotted: str, root: Path) -> bool:
    parts = dotted.split(".")
    for cut in (len(parts), len(parts) - 1):
        base = root.joinpath(*parts[:cut])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.exists():
                rest = parts[cut:]
                # defined there, or exported by name (a package's `__all__`, imported on first use)
                defined = (
                    rf"^(?:def |class |async def )?{re.escape(rest[0])}\b|\"{re.escape(rest[0])}\""
                    if rest
                    else ""
                )
                return not rest or re.search(defined, module.read_text(), flags=re.M) is not None
    return False


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_path_and_module_the_page_names_exists(page: Path) -> None:
    assert stale_names(page.read_text()) == []


def slugs(text: str) -> set[str]:
    """The anchors of `text`'s headings, as mkdocs' `toc` and GitHub make them (code blocks skipped)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    titles = re.findall(r"^#+ (.+)$", prose, flags=re.M)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower()) for title in titles}


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` (`[text](path#anchor)`) to a file, or an anchor of a page, that does
    not exist."""
    broken = []
    prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z][\w+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        unknown_anchor = (
            file.suffix == ".md" and file.exists() and anchor and anchor not in slugs(file.read_text())
        )
        if not file.exists() or unknown_anchor:
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_points_to_a_file_and_anchor(page: Path) -> None:
    assert broken_links(page) == []


def test_broken_links_finds_missing_files_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## The lrs/1 layout\n\n```bash\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md) [ok](a.md#the-lrs1-layout) [web](https://x.org/y#z) [gone](c.md) "
        "[no anchor](a.md#not-a-heading) [here](#b) [ok](#top)\n\n# Top\n"
    )
    assert broken_links(page) == ["c.md", "a.md#not-a-heading", "#b"]


def test_stale_names_finds_moved_files_and_modules(tmp_path: Path) -> None:
    (tmp_path / "reader" / "format").mkdir(parents=True)
    (tmp_path / "reader" / "format" / "v3.py").write_text("def check_tiling():\n    pass\n")
    text = (
        "`reader/format/v3.py` `reader/gone.py` `reader.format.v3` `reader.format.v3.check_tiling` "
        "`reader.format.v3.nothing` `reader.format.gone` `meta/lrs/` `reader`"
    )
    assert stale_names(text, tmp_path) == ["reader.format.gone", "reader.format.v3.nothing", "reader/gone.py"]


def test_imports_checker_reads_names_and_skips_other_packages() -> None:
    text = "```python\nfrom reader import A, B  # x\nfrom torch import T\nfrom reshard.verify import v\n```\n"
    assert imports(text) == {"reader": {"A", "B"}, "reshard.verify": {"v"}}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("readme")
    done = subprocess.run([LRS, "sample", str(work / "v3"), "-q"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shutil.copytree(work / "v3", work / "my-dataset")
    make_defective(work / "v3", work / "droid")
    return work


@pytest.mark.integration
def test_every_bash_snippet_runs(work: Path) -> None:
    ran: list[str] = []
    seen: set[str] = set()
    env = {**os.environ, "NODE_RANK": "3", "NNODES": "4", "SLURM_CPUS_PER_TASK": "2"}
    for block in blocks("bash"):
        for line in commands(relocate(block, work)):
            if any(skip in line for skip in SKIP) or not line.startswith("lrs "):
                assert any(skip in line for skip in SKIP), (
                    f"a documented command, neither lrs nor skipped: {line}"
                )
                continue
            if line in seen:
                continue  # the README repeats a page's command: it ran once already
            seen.add(line)
            args = shlex.split(re.sub(r"\$(\w+)", lambda m: env[m[1]], line))
            done = subprocess.run([LRS, *args[1:]], cwd=work, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"documented command failed: {line}\n{done.stdout}\n{done.stderr}"
            ran.append(args[1])
    # Every command the README and the pages show was run at least once.
    assert {"reshard", "verify", "push", "prewarm", "inspect"} <= set(ran), ran


@pytest.mark.integration
def test_the_training_snippet_runs_and_resumes(work: Path, sample_resharded_ds: Path) -> None:
    """Twice, as a trainer would: a first run that saves a checkpoint, then a resumed one."""
    (snippet,) = [b for b in blocks("python") if "ResumableLoader(" in b and "for epoch" in b]
    bucket = work / "bucket" / "aloha-lrs"
    if not bucket.exists():
        shutil.copytree(sample_resharded_ds, bucket)
    # The snippet runs as it stands, but for one epoch and a count of each batch's samples.
    snippet = snippet.replace("epochs = 2\n", "epochs = 1\n")
    loop = "    for step, batch in enumerate(loader):\n"
    assert snippet.count(loop) == 1 and "epochs = 1\n" in snippet
    snippet = snippet.replace(loop, loop + "        sizes.append(len(batch['index']))\n")
    script = relocate(snippet, work)
    total = DatasetMeta.open(str(bucket)).total_frames
    counts = []
    (work / "ckpt.pt").unlink(missing_ok=True)
    for _resuming in (False, True):  # the second run finds the first's ckpt.pt
        code = "sizes = []\n" + script + "\nprint('sizes', sizes)\n"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        counts.append(eval(done.stdout.split("sizes")[-1]))  # noqa: S307 - our own print of a list
    first, resumed = counts
    # Every frame once; the resumed run continues after the checkpointed first batch.
    assert sum(first) == total and sum(resumed) == total - first[0]
    assert resumed == first[1:]
    # The README's `lrs prewarm --spec` lines read the spec file the loop wrote next to its checkpoint.
    spec_lines = list(
        dict.fromkeys(
            line for b in blocks("bash") for line in commands(relocate(b, work)) if "--spec " in line
        )
    )
    assert spec_lines and (work / "ckpt-spec.json").exists()
    for line in spec_lines:
        done = subprocess.run([LRS, *shlex.split(line)[1:]], cwd=work, capture_output=True, text=True)
        assert done.returncode == 0, f"README command failed: {line}\n{done.stdout}\n{done.stderr}"
        assert done.stdout.startswith("prewarm: "), done.stdout


@pytest.mark.integration
def test_the_batch_loader_snippet_runs(work: Path, sample_resharded_ds: Path) -> None:
    (snippet,) = [b for b in blocks("python") if "BatchLoader(" in b]
    bucket = work / "bucket" / "aloha-lrs"
    if not bucket.exists():
        shutil.copytree(sample_resharded_ds, bucket)
    done = subprocess.run(
        [sys.executable, "-c", relocate(snippet, work)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    batches, consumed = done.stdout.split()[:2]
    assert int(consumed) == 1 and int(batches) == -(-DatasetMeta.open(str(bucket)).total_frames // 8)


@pytest.mark.integration
def test_the_mixture_snippet_runs(work: Path, sample_resharded_ds: Path) -> None:
    (snippet,) = [b for b in blocks("python") if "weights=[" in b]
    for name in ("aloha-lrs", "pusht-lrs"):
        if not (work / "bucket" / name).exists():
            shutil.copytree(sample_resharded_ds, work / "bucket" / name)
    check = (
        "\nfrom collections import Counter\n"
        "counts = Counter(int(item['dataset_index']) for item in stream)\n"
        "assert sorted(counts.items()) == [(0, 1000), (1, 600), (2, 400)], counts\n"
        "assert stream.meta.total_episodes == sum(m.total_episodes for m in stream.meta.sources)\n"
        "assert set(stats) >= {'action', 'observation.state'}\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", relocate(snippet, work) + check], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


@pytest.mark.integration
def test_the_readme_short_loop_runs(work: Path, sample_resharded_ds: Path) -> None:
    """The README's own loop (the whole one, with checkpoints, is the training page's): one epoch, every
    frame once."""
    (snippet,) = [b for b in blocks("python", [README]) if "EpisodeStream(" in b]
    bucket = work / "bucket" / "aloha-lrs"
    if not bucket.exists():
        shutil.copytree(sample_resharded_ds, bucket)
    model = "sizes = []\nepochs = 1\ndef model(batch):\n    sizes.append(len(batch['index']))\n"
    done = subprocess.run(
        [sys.executable, "-c", model + relocate(snippet, work) + "\nprint(sum(sizes))\n"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == DatasetMeta.open(str(bucket)).total_frames


@pytest.mark.integration
def test_the_site_builds_strict(tmp_path: Path) -> None:
    """What `make docs` runs: a warning (a link or anchor that points nowhere, a docstring that does not
    parse) fails the build. mkdocs is a dev dependency: where it is missing, this fails."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("cli/reshard", "api/reader"):
        assert (tmp_path / "site" / page / "index.html").exists(), page
    # The options come from click, the API from docstrings: both rendered, not left as directives.
    assert "--video" in (tmp_path / "site" / "cli" / "reshard" / "index.html").read_text()
    assert "EpisodeStream" in (tmp_path / "site" / "api" / "reader" / "index.html").read_text()
