"""The documentation site: it builds in strict mode with no warning, its generated reference has
a row for every flag, config key, manifest field and report reason, its links and anchors
resolve, and every command and code block on it that can run on the sample runs as written."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from beam_tfrecord.commands.cli import command_parsers
from beam_tfrecord.config import BuildConfig
from beam_tfrecord.entries import Reason
from beam_tfrecord.images import NOTE_CODES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# Material announces its end of life on every build; docs/contributing.md says why it is silenced.
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def _hook():
    """docs/hooks/reference.py, the generator: its anchor names are the ones to look for."""
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built as CI builds it: `mkdocs build --strict` from the repository."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout + done.stderr


def test_the_site_builds_with_no_warning(site):
    _, output = site
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines and all(line.startswith("INFO") for line in lines), output


# --- the generated reference ------------------------------------------------------------------


class _Page(HTMLParser):
    """A built page's element ids, its links, and the text of each table row by the ids in it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.rows: dict[str, str] = {}
        self._row: list[str] | None = None
        self._row_ids: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
            if self._row is not None:
                self._row_ids.append(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag in ("img", "script") and attrs.get("src"):
            self.links.append(attrs["src"])
        if tag == "link" and attrs.get("href") and attrs.get("rel") == "stylesheet":
            self.links.append(attrs["href"])
        if tag == "tr":
            self._row, self._row_ids = [], []

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            for row_id in self._row_ids:
                self.rows[row_id] = " ".join(self._row)
            self._row = None

    def handle_data(self, data):
        if self._row is not None:
            self._row.append(data)


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_every_flag_of_every_command_has_its_row(site):
    out, _ = site
    page = _page(out / "reference" / "commands" / "index.html")
    hook = _hook()
    checked = 0
    for command, parser in command_parsers().items():
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            anchor = hook.flag_anchor(command, action)
            assert anchor in page.rows, f"beam-tfrecord {command}: no row for {action.dest}"
            for flag in action.option_strings or [action.metavar or action.dest]:
                assert flag in page.rows[anchor], (command, flag, page.rows[anchor])
            checked += 1
    assert checked > 40  # every command's flags, build's thirty-odd among them


def test_every_config_key_has_its_row_with_a_meaning(site):
    out, _ = site
    page = _page(out / "reference" / "config" / "index.html")
    for name in BuildConfig.setting_names():
        key = "input" if name == "inputs" else name
        assert key in page.rows, f"config key {key!r} has no row"
        meaning = page.rows[key].split(key, 1)[1]
        assert len(meaning.split()) >= 4, (key, page.rows[key])


def test_every_report_reason_and_note_has_its_row(site):
    out, _ = site
    page = _page(out / "reference" / "report" / "index.html")
    for reason in Reason:
        assert reason.value in page.rows, f"reason {reason.value!r} has no row"
        assert len(page.rows[reason.value].split()) > 4, page.rows[reason.value]
    for note in NOTE_CODES:
        assert f"note-{note}" in page.rows, f"note {note!r} has no row"


def test_every_manifest_field_has_its_row(site):
    out, _ = site
    page = _page(out / "reference" / "manifest" / "index.html")
    for _title, cls, fields, _meanings in _hook().manifest_sections():
        for name in fields:
            assert f"{cls.__name__.lower()}-{name}" in page.rows, (cls.__name__, name)
    # Each type as the declaration writes it.
    assert page.rows["inputs-listed"].split()[:2] == ["listed", "int"]
    assert " dict[str, SplitSummary] " in page.rows["manifest-splits"]


def test_no_page_shows_a_type_as_python_holds_it(site):
    """The manifest reference showed every field's type as `ForwardRef('int', module=...)`."""
    out, _ = site
    shown = [
        str(path.relative_to(out))
        for path in out.rglob("*.html")
        if "ForwardRef(" in path.read_text(encoding="utf-8")
    ]
    assert shown == []


def _declared_keys(manifest: dict) -> None:
    """Compares a real manifest's keys with the TypedDicts build_manifest declares."""
    from beam_tfrecord import manifest as declared

    def fields(cls):
        return set(_hook()._typed_dict_fields(cls))

    assert set(manifest) == fields(declared.Manifest) - (
        set() if "given_classes" in manifest else {"given_classes"}
    )
    assert set(manifest["inputs"]) == fields(declared.Inputs)
    assert set(manifest["work"]) == fields(declared.Work)
    for split in manifest["splits"].values():
        assert set(split) == fields(declared.SplitSummary)
    for shard in manifest["shards"]:
        assert set(shard) == fields(declared.ShardSummary)
    if "given_classes" in manifest:
        assert set(manifest["given_classes"]) == fields(declared.GivenClasses)
    assert set(manifest["config"]) == set(BuildConfig.setting_names())


def test_a_real_manifest_holds_exactly_the_declared_fields(tmp_path):
    """What the manifest reference is generated from is what a build writes."""
    from beam_tfrecord.beam.pipeline import build

    # A --classes name no input has fills given_classes; publishing it takes the allowance.
    config = BuildConfig.from_settings(
        {"input": [str(REPO / "samples" / "fruits")], "output": str(tmp_path / "out"),
         "classes": "apple,banana,cheery", "allow_missing_classes": True}
    )  # fmt: skip
    manifest = build(config).manifest
    assert manifest["given_classes"]["not_found"] == ["cheery"]
    _declared_keys(manifest)
    _declared_keys(json.loads((tmp_path / "out" / "manifest.json").read_text()))


# --- links ------------------------------------------------------------------------------------


def test_every_internal_link_and_anchor_of_the_site_resolves(site):
    out, _ = site
    # 404.html is served at any depth, so its links are from the site's root: not relative.
    pages = {path.resolve(): _page(path) for path in out.rglob("*.html") if path.name != "404.html"}
    assert len(pages) > 25
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//") or link.startswith("mailto:"):
                continue  # outside the site: nothing is fetched
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{path.relative_to(out)}: {link} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _page(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(out)}: {link} (no such anchor)")
    assert broken == []


def test_the_readme_links_to_files_that_exist():
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    for link in links:
        parts = urlsplit(link)
        if parts.scheme:
            continue
        if parts.path:
            assert (REPO / parts.path).is_file(), link
        else:
            heading = parts.fragment.replace("-", " ")
            assert re.search(rf"^#+ {heading}$", readme, re.M | re.I), link


# --- the commands and code blocks -------------------------------------------------------------

_FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S
)
_NOT_RUN = re.compile(r"<!-- not run: [^>]+ -->\s*$")
_RUN = {"bash", "sh", "python"}


def blocks(path: Path) -> list[tuple[str, str]]:
    """A page's code blocks to run, in order, as (language, code): every `bash` and `python`
    block not marked `<!-- not run: why -->` on the line before it, and each `yaml` block that
    names its file on its first line (`# photos.yaml`), which is written for the blocks after it.
    The README's Set up and Use blocks are tests/test_readme.py's."""
    text = path.read_text(encoding="utf-8")
    if path.name == "README.md":
        text = re.sub(r"\n## (Set up|Use)\n.*?(?=\n## )", "\n", text, flags=re.S)
    found = []
    for match in _FENCE.finditer(text):
        lang = match.group("lang")
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        body = re.sub(rf"(?m)^{match.group('indent')}", "", match.group("body"))
        if _NOT_RUN.search(before):
            continue
        names_its_file = lang == "yaml" and re.match(r"# [\w.-]+\.yaml\n", body)
        if lang in _RUN or names_its_file:
            found.append((lang, body))
    return found


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_every_block_is_run_or_says_why_not():
    """No page holds a command or code block that is neither run nor marked, and the runner
    finds blocks on the pages that have them."""
    for path in _pages():
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            lang = match.group("lang")
            assert lang, f"{path}: a block without a language: {match.group('body')[:80]}"
    assert sum(len(blocks(p)) for p in _pages()) > 25


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder as a clone is, with the sample built (`out/fruits`), and the environment the
    tests run in as its `.venv`, first on PATH as after `source .venv/bin/activate`."""
    folder = tmp_path_factory.mktemp("pages")
    for name in ("samples", "configs", "pipelines"):
        shutil.copytree(REPO / name, folder / name)
    (folder / ".venv").symlink_to(sys.prefix)
    env = {**os.environ, "PATH": f"{folder / '.venv' / 'bin'}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        ["beam-tfrecord", "build", "--config", "configs/sample.yaml"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return folder, env


@pytest.mark.parametrize(
    "page", [p.relative_to(REPO).as_posix() for p in _pages() if blocks(p)]
)  # fmt: skip
def test_the_page_runs_as_written(page, workdir):
    folder, env = workdir
    for number, (lang, code) in enumerate(blocks(REPO / page)):
        if lang == "yaml":
            name = code.split("\n", 1)[0][2:].strip()
            yaml.safe_load(code)
            (folder / name).write_text(code)
            continue
        if lang == "python":
            script = folder / f"block_{Path(page).stem}_{number}.py"
            script.write_text(code)
            command = [sys.executable, script.name]
        else:
            command = ["bash", "-c", "set -euo pipefail\n" + code]
        done = subprocess.run(
            command, cwd=folder, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{page}, block {number}:\n{code}\n{done.stdout}{done.stderr}"


def test_each_class_the_python_guide_names_imports_as_it_says():
    """The guide named `SubmittedBuild`, which `beam_tfrecord` did not export, and the reading
    errors without where they import from. Each class it names is the package's (lazily, as
    the others), or named with its import path; or a built-in."""
    import builtins

    import beam_tfrecord

    text = " ".join((DOCS / "guide" / "python.md").read_text(encoding="utf-8").split())
    for name in sorted(set(re.findall(r"`([A-Z]\w+)`", text))):
        if hasattr(builtins, name):
            continue
        imported = re.search(rf"`from (beam_tfrecord[\w.]*) import {name}`", text)
        if imported:
            module = importlib.import_module(imported.group(1))
        else:
            assert name in beam_tfrecord.__all__, f"the guide names {name}, not exported"
            module = beam_tfrecord
        assert isinstance(getattr(module, name), type), name


def test_the_pages_say_only_an_interrupted_build_keeps_its_lock():
    """They said a local output kept its lock until `release_output` or the end of the process,
    where a build that ends releases it as build() returns."""
    for page in ("guide/python.md", "guide/output-lock.md"):
        text = " ".join((DOCS / page).read_text(encoding="utf-8").split())
        (said,) = [s for s in re.split(r"(?<=\.) ", text) if "`release_output(output)`" in s]
        assert "interrupted build" in said, (page, said)
        assert "build()` releases" in text or "releases it as `build` returns" in text, page


def test_the_python_example_leaves_logging_as_it_was(workdir):
    """The guide's "From Python" example, run as a script: the summary it prints, and nothing of
    Beam's on stderr (the library leaves the program's logging as it was): the build's own
    warning alone, of the sample's truncated image, as the command's summary gives it."""
    folder, env = workdir
    ((_, code),) = blocks(DOCS / "guide" / "python.md")
    (folder / "example.py").write_text(code)
    shutil.rmtree(folder / "out" / "fruits-py", ignore_errors=True)  # the page's own run made it
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=folder, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "1 of 46 inputs was NOT written (truncated: 1); see out/fruits-py/report.jsonl\n"
    )
    manifest = json.loads((folder / "out" / "fruits-py" / "manifest.json").read_text())
    assert manifest["config"]["resize"] == "64"
    assert "'written': 45" in done.stdout, done.stdout
