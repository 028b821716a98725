"""MkDocs hook: the reference pages, generated from the code each time the site is built.

Nothing here is written twice. The commands' flags come from their argparse parsers, the config
file's keys from the settings table (beam_tfrecord.settings: each key's default and meaning),
manifest.json's fields from the TypedDicts build_manifest writes, and the report's vocabulary from entries.Reason (each
code's docstring), ReportEntry and images.NOTE_CODES. Anything declared without a description
fails the build, so that a new flag, key or reason cannot go undocumented.
"""

from __future__ import annotations

import argparse
import ast
import html
import inspect
import json
import re
import textwrap
from collections.abc import Iterable

from mkdocs.structure.files import File

# The pages this hook adds, under docs/ as the site sees them.
COMMANDS_PAGE = "reference/commands.md"
CONFIG_PAGE = "reference/config.md"
MANIFEST_PAGE = "reference/manifest.md"
REPORT_PAGE = "reference/report.md"


def on_files(files, config):
    """Adds the generated pages to the site's files (MkDocs event)."""
    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def pages() -> dict[str, str]:
    """Every generated page: its path under docs/ and its Markdown."""
    return {
        COMMANDS_PAGE: commands_page(),
        CONFIG_PAGE: config_page(),
        MANIFEST_PAGE: manifest_page(),
        REPORT_PAGE: report_page(),
    }


# --- helpers ---------------------------------------------------------------------------------


def _inline(text: str) -> str:
    """Text for an HTML cell: escaped, with `code` spans kept as code."""
    parts = re.split(r"(`[^`]+`)", text)
    return "".join(
        f"<code>{html.escape(p[1:-1])}</code>" if p.startswith("`") else html.escape(p)
        for p in parts
    )


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """An HTML table (cells already HTML): Markdown tables would split on the `|` of a metavar."""
    head_html = "".join(f"<th>{h}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>\n<thead><tr>{head_html}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n"


def _attributes(docstring: str | None) -> dict[str, str]:
    """The `Attributes:` section of a Google-style docstring: name -> description, in order."""
    text = inspect.cleandoc(docstring or "")
    found: dict[str, str] = {}
    lines = text.splitlines()
    try:
        start = lines.index("Attributes:") + 1
    except ValueError:
        return found
    name = None
    for line in lines[start:]:
        if line and not line.startswith(" "):  # the next section
            break
        match = re.match(r"^ {4}(\w+): ?(.*)$", line)
        if match:
            name = match.group(1)
            found[name] = match.group(2).strip()
        elif name and line.strip():
            found[name] += " " + line.strip()
    return found


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:]


def _missing(what: str, names: Iterable[str]) -> None:
    names = sorted(names)
    if names:
        raise RuntimeError(f"{what} without a description (add one where it is declared): {names}")


# --- commands --------------------------------------------------------------------------------


def flag_anchor(command: str, action: argparse.Action) -> str:
    """The HTML id of a flag's row: `build-input`, `verify-paths`, `beam-tfrecord-version`."""
    names = action.option_strings or [action.dest]
    longest = max(names, key=len).lstrip("-")
    return f"{command or 'beam-tfrecord'}-{longest}"


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's arguments the reference lists: all of them but -h/--help."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
    ]


def _flag_rows(command: str, parser: argparse.ArgumentParser, actions) -> list[list[str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in actions:
        hidden = action.help == argparse.SUPPRESS
        if hidden:
            meaning = _hidden_flag_meaning(action)
        else:
            meaning = formatter._expand_help(action) if action.help else ""
        if not meaning:
            _missing(f"beam-tfrecord {command} flags", [flag_anchor(command, action)])
        invocation = formatter._format_action_invocation(action)
        if action.choices and not action.option_strings:
            invocation = action.dest
        anchor = flag_anchor(command, action)
        rows.append(
            [
                f'<a id="{anchor}" href="#{anchor}"><code>{html.escape(invocation)}</code></a>',
                _inline(_sentence(meaning)) + (" <em>(not shown by --help)</em>" if hidden else ""),
            ]
        )
    return rows


def _hidden_flag_meaning(action: argparse.Action) -> str:
    """A flag --help hides is a config setting's: its description is the setting's."""
    setting = _setting_descriptions().get(action.dest)
    return f"{setting} (the config key `{action.dest}`)" if setting else ""


def commands_page() -> str:
    from beam_tfrecord.commands.cli import command_parsers

    parsers = command_parsers()
    out = [
        "# Commands and flags",
        "",
        "Generated from the commands' own parsers when this site is built: what "
        "`beam-tfrecord COMMAND --help` prints, as a page. Every setting of `build` can also "
        "be a key of its `--config` file: see [the config file](config.md).",
        "",
    ]
    for command, parser in parsers.items():
        title = f"beam-tfrecord {command}" if command else "beam-tfrecord"
        out += [f"## `{title}` {{#{command or 'beam-tfrecord'}}}", ""]
        if parser.description:
            out += [_sentence(parser.description).rstrip(".") + ".", ""]
        usage = parser.format_usage().replace("usage: ", "", 1).strip()
        out += ["```text", usage, "```", ""]
        if not command:
            names = ", ".join(f"[`{n}`](#{n})" for n in parsers if n)
            out += [f"Commands: {names}.", ""]
        for group in parser._action_groups:
            actions = [a for a in group._group_actions if a in documented_actions(parser)]
            if not actions:
                continue
            title = group.title if group.title not in ("options", "optional arguments") else ""
            if title and title != "positional arguments":
                out += [f"**{_sentence(title)}**", ""]
            out += [_table(["flag", "meaning"], _flag_rows(command, parser, actions)), ""]
        if parser.epilog:
            out += [_inline(parser.epilog), ""]
    return "\n".join(out)


# --- config ----------------------------------------------------------------------------------


def _setting_descriptions() -> dict[str, str]:
    """Each setting's meaning: its `about` in the settings table, or for an image setting
    ImagePolicy's docstring for the field it sets."""
    from beam_tfrecord.config import BuildConfig
    from beam_tfrecord.images.policy import ImagePolicy
    from beam_tfrecord.settings import setting

    policy = _attributes(ImagePolicy.__doc__)
    described = {}
    for name in BuildConfig.setting_names():
        declared = setting(name)
        described[name] = (
            policy.get(declared.policy_field, "") if declared.policy_field else declared.about
        )
    return described


def setting_key(name: str) -> str:
    """A setting as a config file spells it (`input` for the field `inputs`)."""
    return "input" if name == "inputs" else name


def _default_text(name: str, value) -> str:
    from beam_tfrecord.settings import setting

    if name in ("inputs", "output"):
        return "required" if name == "output" else "required, or <code>input_list</code>"
    if value is None:
        return "none"
    if setting(name).kind == "size":  # as a file or flag writes it: 100MB
        return f"<code>{html.escape(setting(name).shown_default())}</code>"
    return f"<code>{html.escape(json.dumps(value))}</code>"


def config_page() -> str:
    from beam_tfrecord.commands.cli import command_parsers
    from beam_tfrecord.config import BuildConfig

    build = command_parsers()["build"]
    flags: dict[str, list[argparse.Action]] = {}
    for action in documented_actions(build):
        setting = BuildConfig.setting_of(action.dest)
        if setting is not None:
            flags.setdefault(setting, []).append(action)
    descriptions = _setting_descriptions()
    _missing("config settings", [n for n, text in descriptions.items() if not text])
    defaults = BuildConfig.defaults()
    rows = []
    for name in BuildConfig.setting_names():
        key = setting_key(name)
        flag_links = ", ".join(
            f'<a href="../commands/#{flag_anchor("build", a)}"><code>{html.escape(s)}</code></a>'
            for a in flags.get(name, [])
            for s in a.option_strings
        )
        rows.append(
            [
                f'<a id="{key}" href="#{key}"><code>{key}</code></a>',
                _default_text(name, defaults.get(name)),
                flag_links or "-",
                _inline(_sentence(descriptions[name])),
            ]
        )
    return "\n".join(
        [
            "# The config file",
            "",
            "`beam-tfrecord build --config FILE` reads a YAML mapping of these keys; a flag given "
            "on the command line wins over the file. Keys may be written with `-` or `_`. "
            "`manifest.json`'s `config` holds every key, resolved, and "
            "`BuildConfig.from_settings` takes the same mapping from Python. Generated from "
            "`beam_tfrecord.settings`, where each setting is declared, when this site is built.",
            "",
            _table(["key", "default", "flag", "meaning"], rows),
            "",
            "An unknown key is refused before anything runs, with the nearest known one. "
            "Relative paths in the file are taken from the current folder, as on the command "
            "line, not from the file's. See [Config files](../guide/config-files.md) for "
            "examples.",
            "",
        ]
    )


# --- manifest.json ---------------------------------------------------------------------------


def _typed_dict_fields(cls) -> dict[str, str]:
    """A TypedDict's fields (its bases' first) -> their annotations, as written."""
    fields: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in getattr(klass, "__annotations__", {}).items():
            if klass.__module__ == cls.__module__:
                fields[name] = _as_written(annotation)
    return fields


def _as_written(annotation) -> str:
    """An annotation as its source wrote it (`dict[str, int]`). Under `from __future__ import
    annotations` a TypedDict keeps each one as a ForwardRef, whose str() is
    `ForwardRef('int', module=...)`: the page showed that for every field."""
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__forward_arg__", None) or str(annotation)


def manifest_sections() -> list[tuple[str, type, dict[str, str], dict[str, str]]]:
    """manifest.json's declared parts: (title, TypedDict, field -> type, field -> meaning)."""
    from beam_tfrecord import manifest as module

    parts = [
        ("manifest.json", module.Manifest),
        ("inputs", module.Inputs),
        ("work", module.Work),
        ("splits: each split", module.SplitSummary),
        ("shards: each shard", module.ShardSummary),
        ("given_classes", module.GivenClasses),
    ]
    sections = []
    for title, cls in parts:
        fields = _typed_dict_fields(cls)
        meanings = _attributes(cls.__doc__)
        _missing(f"manifest fields of {cls.__name__}", set(fields) - set(meanings))
        extra = set(meanings) - set(fields)
        if extra:
            raise RuntimeError(f"{cls.__name__}'s docstring describes no field {sorted(extra)}")
        sections.append((title, cls, fields, meanings))
    return sections


def manifest_page() -> str:
    from beam_tfrecord.manifest import Manifest

    out = [
        "# manifest.json",
        "",
        _inline(inspect.cleandoc(Manifest.__doc__).split("\n\n")[0].replace("\n", " ")),
        "",
        "Generated from the declarations `build_manifest` writes "
        "(`beam_tfrecord.manifest.Manifest` and the parts below) when this site is built.",
        "",
    ]
    for title, cls, fields, meanings in manifest_sections():
        anchor = cls.__name__.lower()
        out += [f"## `{title}` {{#{anchor}}}", ""]
        if cls.__name__ != "Manifest":
            out += [_inline(inspect.cleandoc(cls.__doc__).split("\n\n")[0].replace("\n", " ")), ""]
        rows = [
            [
                f'<a id="{anchor}-{name}" href="#{anchor}-{name}"><code>{name}</code></a>',
                f"<code>{html.escape(fields[name])}</code>",
                _inline(_sentence(meanings[name])),
            ]
            for name in meanings
        ]
        out += [_table(["field", "type", "meaning"], rows), ""]
    return "\n".join(out)


# --- report.jsonl ----------------------------------------------------------------------------


def reason_docstrings() -> dict[str, str]:
    """Each Reason code -> its docstring (the string literal after the member), from the source."""
    from beam_tfrecord.entries import Reason

    tree = ast.parse(textwrap.dedent(inspect.getsource(Reason)))
    body = tree.body[0].body
    found: dict[str, str] = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if (
            isinstance(node, ast.Assign)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in Reason.__members__:
                    found[Reason[target.id].value] = inspect.cleandoc(after.value.value)
    _missing("report reasons", {r.value for r in Reason} - set(found))
    return {r.value: found[r.value] for r in Reason}


def report_page() -> str:
    from beam_tfrecord.entries import Reason, ReportEntry
    from beam_tfrecord.images import NOTE_CODES

    fields = _attributes(ReportEntry.__doc__)
    declared = [f.name for f in ReportEntry.__dataclass_fields__.values()]
    _missing("report.jsonl fields", set(declared) - set(fields))
    reasons = reason_docstrings()
    modified = {Reason.NORMALIZED.value}
    _missing("report notes", [code for code, text in NOTE_CODES.items() if not text])
    return "\n".join(
        [
            "# report.jsonl and its reasons",
            "",
            "Every input a build lists is written, or has a line in `report.jsonl` saying why "
            "not; an image written but changed has one too. One JSON object a line, in path "
            "order; `reports/{shard}.jsonl` holds each shard's lines, and `manifest.json`'s "
            "`inputs.skipped_by_reason` counts them. Generated from "
            "`beam_tfrecord.entries` when this site is built. See "
            "[Bad inputs and the report](../guide/report.md) for what to do about each.",
            "",
            "## A line's fields {#fields}",
            "",
            _table(
                ["field", "meaning"],
                [
                    [
                        f'<a id="field-{n}" href="#field-{n}"><code>{n}</code></a>',
                        _inline(_sentence(fields[n])),
                    ]
                    for n in declared
                ],
            ),
            "",
            "A field without a value (no `split`, no `label`, no `notes`) is left out of the line.",
            "",
            "## Reasons {#reasons}",
            "",
            "Codes are stable and never change meaning.",
            "",
            _table(
                ["reason", "action", "meaning"],
                [
                    [
                        f'<a id="{code}" href="#{code}"><code>{code}</code></a>',
                        "modified" if code in modified else "skipped",
                        _inline(text.replace("\n", " ")),
                    ]
                    for code, text in reasons.items()
                ],
            ),
            "",
            "## Notes of a modified image {#notes}",
            "",
            "A `normalized` line's `notes` say what was changed or noticed.",
            "",
            _table(
                ["note", "meaning"],
                [
                    [f'<a id="note-{c}" href="#note-{c}"><code>{c}</code></a>', _inline(t)]
                    for c, t in NOTE_CODES.items()
                ],
            ),
            "",
        ]
    )


__all__ = [
    "documented_actions",
    "flag_anchor",
    "manifest_sections",
    "on_files",
    "pages",
    "reason_docstrings",
    "setting_key",
]
