"""The package's structure, read from its syntax tree: functions that fit on a screen, and each
concept's knowledge (shard-name patterns, "is this a URL?", command-line flags) in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "beam_tfrecord"
MAX_LINES = 60

# Functions over the limit that are still to be split, with their length when they were found:
# none may grow, and a new function may not join them. Empty since issue 33: a function that
# must stay long says why in its docstring instead.
TO_SPLIT: dict[str, int] = {}
# A docstring that says why its function is long holds one of these words.
_SAYS_WHY = re.compile(r"\b(long|one piece|must stay together)\b", re.IGNORECASE)


def _modules() -> list[tuple[str, ast.Module, list[str]]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        found.append((path.relative_to(PACKAGE).as_posix(), ast.parse(source), source.splitlines()))
    return found


def _functions(tree: ast.Module):
    """(qualified name, node) of every function, methods as `Class.method`."""

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")

    yield from walk(tree, "")


def lines_of_code(node: ast.AST, lines: list[str]) -> int:
    """A function's lines that hold code: not blank, not comments, not its docstring."""
    skip: set[int] = set()
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        skip = set(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(
        1
        for number in range(node.lineno, node.end_lineno + 1)
        if number not in skip and lines[number - 1].strip()
        and not lines[number - 1].strip().startswith("#")
    )  # fmt: skip


def test_functions_fit_on_a_screen_or_say_why():
    too_long = {}
    for module, tree, lines in _modules():
        for name, node in _functions(tree):
            length = lines_of_code(node, lines)
            if length <= MAX_LINES or _SAYS_WHY.search(ast.get_docstring(node) or ""):
                continue
            too_long[f"{module}:{name}"] = length
    grown = {k: v for k, v in too_long.items() if v > TO_SPLIT.get(k, MAX_LINES)}
    assert not grown, f"over {MAX_LINES} lines of code, and no docstring saying why: {grown}"
    split = set(TO_SPLIT) - set(too_long)
    assert not split, f"split since (remove them from TO_SPLIT): {sorted(split)}"


def _constants(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str)
        ):
            yield node


def _text(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return node.value
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            ids.add(id(body[0].value))
    return ids


@pytest.mark.parametrize(
    ("what", "pattern", "home"),
    [
        # A shard name's shape: `.tfrecord-` then an index, in a pattern or a format.
        ("shard-name patterns", re.compile(r"\.tfrecord-[\[({\\]|-of-[\[({\\]"), "shard_names.py"),
        # "Is this a URL?" asked of a string.
        ("'://' tests", re.compile(r"^://$"), "locations.py"),
    ],
)
def test_a_concept_lives_in_one_module(what, pattern, home):
    elsewhere = []
    for module, tree, _ in _modules():
        if module == home:
            continue
        docstrings = _docstrings(tree)
        for node in _constants(tree):
            if id(node) not in docstrings and pattern.search(_text(node)):
                elsewhere.append(f"{module}:{node.lineno}")
    assert not elsewhere, f"{what} outside {home}: {elsewhere}"


def test_only_commands_declare_flags():
    elsewhere = []
    for module, tree, _ in _modules():
        if module.startswith("commands/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "add_argument":
                elsewhere.append(f"{module}:{node.lineno}")
    assert not elsewhere, f"command-line flags declared outside commands/: {elsewhere}"


# Private names of other code that may be used outside the compatibility modules, and why.
_OTHERS_PRIVATES_ALLOWED = {
    "_exit": "os._exit: public, despite its name",
    "_module": "the command's module, set by our own set_defaults(_module=...)",
    "_cat_file": "fsspec's async API, underscored by its convention",
    # The store clients' own (fsspec, gcsfs, s3fs), not Beam's or Python's: the listing checks
    # for them (`hasattr`) and falls back to fsspec's public listing.
    "_strip_protocol": "fsspec",
    # fsspec's, as its own url_to_fs calls it: the options a URL names (an object's version).
    "_get_kwargs_from_urls": "fsspec",
    "_call": "gcsfs",
    "_call_s3": "s3fs",
    # gcsfs's own request's parts, so that the reads and uploads that skip its layers
    # (remote._read_gcs_object, uploads.GcsUpload) are still its requests: its endpoint,
    # credentials, requester-pays project and session, and whether a bucket is zonal (written
    # over gRPC, through its own file). tests/test_remote.py and tests/test_uploads.py run
    # them against a real gcsfs and fake-gcs-server.
    "_location": "gcsfs",
    "_get_headers": "gcsfs",
    "_get_params": "gcsfs",
    "_set_session": "gcsfs",
    "_is_zonal_bucket": "gcsfs",
    # Whether its session carries a client certificate (mTLS): reads then go through that
    # session, not http_get.
    "_use_client_cert": "gcsfs",
    # botocore's client (aiobotocore's): the credentials its own requests are signed with, which
    # s3_get signs its GETs with; and aiohttp's connector closed at exit where its event loop no
    # longer runs, as gcsfs closes its own. tests/test_s3_get.py runs them against moto.
    "_get_credentials": "botocore",
    "_close": "aiohttp",
}
_COMPAT_MODULES = ("compat.py", "beam/compat.py")


def test_private_parts_of_python_and_beam_are_used_only_in_the_compatibility_modules():
    """An attribute with a leading underscore that the package does not define itself is some
    other code's private: Python's or Beam's belong in `compat` or `beam.compat`, where each
    says the versions it was checked on and tests/test_compat.py tests it."""
    modules = _modules()
    ours: set[str] = set()
    for _, tree, _ in modules:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.alias):
                ours.add(node.asname or node.name.rsplit(".", 1)[-1])
            elif isinstance(node, ast.arg):
                ours.add(node.arg)

    def privates(node: ast.AST):
        if isinstance(node, ast.Attribute):
            yield node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
        ):
            yield str(node.args[1].value)

    found = []
    for module, tree, _ in modules:
        if module in _COMPAT_MODULES:
            continue
        for node in ast.walk(tree):
            for name in privates(node):
                if (
                    name.startswith("_")
                    and not name.startswith("__")
                    and name not in ours
                    and name not in _OTHERS_PRIVATES_ALLOWED
                ):
                    found.append(f"{module}:{node.lineno} {name}")
    assert not found, f"others' private names outside the compatibility modules: {found}"
