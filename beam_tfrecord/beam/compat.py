"""Every reliance on a private or version-specific part of Beam's objects, each checked on the
versions `beam_tfrecord.compat.BEAM_CHECKED` names; tests/test_compat.py fails when one breaks.

Beam's names and texts matched as strings (logger names, an import's log line) are in
`beam_tfrecord.compat`, which the command line imports before Beam.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import types
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.compat import option_strings

__all__ = [
    "BuildOptions",
    "OptionRefused",
    "beam_flags",
    "beam_option_parser",
    "dofn_specs_remembered",
    "job_id_of",
    "job_of",
    "prompt_bundle_ends",
    "raised_in",
    "refused_job",
    "run_on_fn_api_runner",
    "without_step_names",
]


class BuildOptions(PipelineOptions):
    """Beam's PipelineOptions for a build: the same flags and values, each view made once.

    Beam asks a pipeline's options for a view (`view_as(TypeOptions)`, ...) several times for
    every transform it applies, fuses and runs, and each view is a new object that builds an
    argparse parser and parses the flags again: some 450 views and a fifth of a second of a
    build's start, before any image is listed. All views of one options object share its
    values (the private `_all_options`, which a view's first making fills in), so one view per
    class serves every later call alike, a value set through it included.
    """

    def view_as(self, cls):
        # Not an option, so not through PipelineOptions.__setattr__, which takes options only.
        views = self.__dict__.setdefault("_views", {})
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self):
        # The views are made again where the options are unpickled.
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state


@contextlib.contextmanager
def dofn_specs_remembered():
    """Within: Beam finds each DoFn's state and timer specs once, not at every ask.

    Beam asks a DoFn for them (`userstate.get_dofn_specs`) some six times, as it builds the
    ParDo's signature, checks it, encodes the graph, fuses it and makes each stage's operations,
    and each ask takes `inspect.signature` of every method the DoFn has (some thirty): about
    1.3 CPU-seconds of a build's start on 2 cores, for a graph whose DoFns hold no state. The
    answer depends only on the DoFn's methods, which do not change, so it is kept by the DoFn
    object (held here, so that no other object takes its id) until the block ends. Beam's
    callers look the function up in its module at every call, as does `is_stateful_dofn`.

    The DirectRunner unpickles each stage's DoFns anew for its bundles: a new object whose
    specs are its class's, but for the methods Beam inspects through the object itself (a
    `_inspect_<method>` hook) and those the object sets itself (a Map's function). The class's
    part is kept by class, the rest found again for each object (`_class_specs`): 119 asks a
    build, 0.19 s of CPU, were made for objects already seen by another name.
    """
    from apache_beam.transforms import userstate

    original = userstate.get_dofn_specs
    if getattr(original, "remembers", False):  # within another such block
        yield
        return
    kept: dict[int, tuple[Any, Any]] = {}
    # (class, names its object sets) -> the state and timer specs of the class's methods, and
    # the methods found again for each object (their `_inspect_` hooks).
    by_class: dict[tuple[type, frozenset[str]], tuple[frozenset, frozenset, tuple[str, ...]]] = {}

    def get_dofn_specs(dofn):
        found = kept.get(id(dofn))
        if found is None or found[0] is not dofn:
            found = kept[id(dofn)] = (dofn, _class_specs(dofn, by_class) or original(dofn))
        return found[1]

    get_dofn_specs.remembers = True  # type: ignore[attr-defined]
    userstate.get_dofn_specs = get_dofn_specs
    try:
        yield
    finally:
        userstate.get_dofn_specs = original


def _class_specs(dofn, by_class: dict) -> tuple[set, set] | None:
    """`userstate.get_dofn_specs(dofn)` from what its class's methods give (found once for a
    class and the names its object sets, kept in `by_class`) and what the object's own bound
    methods and `_inspect_<method>` hooks give now; None when the object may change what a name
    gives at every look (a `__getattr__`, a hook of its own).

    Beam's function: each bound method of the object (`dir`; a plain function set on the
    object, as a Map's `process` is, is none), its parameters' defaults as `MethodWrapper`
    reads them (a hook's answer, else the method's signature), and of those the state and
    timer parameters' specs (checked: BEAM_CHECKED)."""
    from apache_beam.runners.common import MethodWrapper
    from apache_beam.transforms.core import _DoFnParam, _StateDoFnParam, _TimerDoFnParam

    cls = type(dofn)
    own = getattr(dofn, "__dict__", {})
    if hasattr(cls, "__getattr__") or any(name.startswith("_inspect_") for name in own):
        return None

    def specs_of(names) -> tuple[set, set]:
        states, timers = set(), set()
        for name in names:
            defaults = MethodWrapper(dofn, name).defaults
            ids = [d.param_id for d in defaults if isinstance(d, _DoFnParam)]
            if len(ids) != len(set(ids)):  # Beam's own check, and its words
                raise ValueError(f"DoFn {dofn!r} has duplicate {name} method parameters: {ids}.")
            for default in defaults:
                if isinstance(default, _StateDoFnParam):
                    states.add(default.state_spec)
                elif isinstance(default, _TimerDoFnParam):
                    timers.add(default.timer_spec)
        return states, timers

    key = (cls, frozenset(own))
    known = by_class.get(key)
    if known is None:
        methods = [
            name
            for name in dir(dofn)
            if name not in own and isinstance(getattr(dofn, name, None), types.MethodType)
        ]
        hooked = tuple(name for name in methods if hasattr(cls, f"_inspect_{name}"))
        states, timers = specs_of(name for name in methods if name not in hooked)
        known = by_class[key] = (frozenset(states), frozenset(timers), hooked)
    bound = [name for name, value in own.items() if isinstance(value, types.MethodType)]
    states, timers = specs_of([*known[2], *bound])
    return set(known[0]) | states, set(known[1]) | timers


# How often Beam's state sampler wakes in a bundle that runs long. Its default, 200 ms, is also
# how long the bundle's end may wait for it (below).
PROMPT_SAMPLING_MS = 20


@contextlib.contextmanager
def prompt_bundle_ends(sampling_ms: int = PROMPT_SAMPLING_MS):
    """Within: a bundle the FnApiRunner runs here ends within `sampling_ms` of its last element.

    Each bundle starts a thread that samples which step runs (for Beam's msecs counters): it
    sleeps 2 ms, then 20% longer at each wake, up to 200 ms, and the bundle's end joins it, so
    waits out its sleep. A build's write step is one bundle as long as the build: its end
    waited 0-200 ms (about 100 on average; 190 measured) with both cores idle, after the last
    shard was written, before the steps that write the report and the manifest could start.
    At `sampling_ms` the thread wakes 50 times a second, a few microseconds each.

    Beam makes the sampler where it makes a bundle's processor, as
    `statesampler.StateSampler(prefix, counter_factory)`, looked up in its module at each call,
    with the period a default argument (checked: BEAM_CHECKED); within the block that name is
    a subclass whose default is `sampling_ms`.
    """
    from apache_beam.runners.worker import statesampler

    original = statesampler.StateSampler
    if getattr(original, "prompt", False):  # within another such block
        yield
        return

    class PromptStateSampler(original):  # type: ignore[misc, valid-type]
        prompt = True

        def __init__(self, prefix, counter_factory, sampling_period_ms=sampling_ms):
            super().__init__(prefix, counter_factory, sampling_period_ms)

    statesampler.StateSampler = PromptStateSampler
    try:
        yield
    finally:
        statesampler.StateSampler = original


def run_on_fn_api_runner(pipeline, options: PipelineOptions):
    """Runs `pipeline` on the DirectRunner's batch engine, the FnApiRunner, built as the
    DirectRunner builds it: with the options, encoded as a job service encodes them, in its
    provision info (where DoFns' `setup` finds them).

    `fn_runner.FnApiRunner`, `ExtendedProvisionInfo` and `JobServiceHandle` are Beam's
    internals, not its API.
    """
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    with prompt_bundle_ends():
        return fn_runner.FnApiRunner(provision_info=provision).run_pipeline(pipeline, options)


def job_of(result) -> Any:
    """The job DataflowRunner built, kept on a dry run's result (`job`) or on the runner, which
    the result holds in its private `_runner`; None from other runners."""
    return getattr(result, "job", None) or getattr(getattr(result, "_runner", None), "job", None)


def job_id_of(result) -> str | None:
    """The id of a submitted job; None if it has none (a template, a runner without ids).

    The portable runner's result (Flink, Spark, a job service) keeps its id in the private
    `_job_id`, without a method to ask for it.
    """
    try:
        return result.job_id()
    except (AttributeError, NotImplementedError):
        return getattr(result, "_job_id", None)


def refused_job(error: Exception) -> str | None:
    """What a remote runner's refusal of the job's options says, on one line; None for any other
    error. Before it submits anything, DataflowRunner checks its options (project, region,
    temp_location...) and stages the packages it is given: matched by the texts of Beam's
    messages, which have no types of their own."""
    message = str(error)
    if isinstance(error, ValueError) and message.startswith("Pipeline has validations errors"):
        problems = [line.strip() for line in message.splitlines()[1:] if line.strip()]
        return "; ".join(problems) or message
    if isinstance(error, RuntimeError) and "cannot be found" in message:
        return " ".join(message.split())
    return None


# What Beam adds to the message of an error a transform raised: the transform's full label.
_STEP_NAMES = re.compile(r"\s*\[while running '([^']*)'\]")
# What a runner may add to a transform's label (Dataflow's Runner v2: `...-ptransform-57`).
_LABEL_SUFFIX = re.compile(r"-ptransform-\d+$")


def without_step_names(message: str) -> str:
    """`message` without the `[while running 'ConvertImages/WriteShards/...']` Beam adds to an
    error a transform raised (whose label path, `/WriteShards/`, names the step that failed)."""
    return _STEP_NAMES.sub("", message)


def raised_in(error: BaseException, step: str) -> bool:
    """Whether `error` is Beam's for an error a transform labelled `step` raised (or one of
    the transforms within it): the message names the transform's full label, of which the step
    is a whole part (`[while running 'ConvertImages/WriteManifest']`, `'.../WriteShards/Write'`)."""
    return any(
        step in _LABEL_SUFFIX.sub("", label).split("/") for label in _STEP_NAMES.findall(str(error))
    )


class OptionRefused(Exception):
    """What `beam_option_parser` raises for a flag or value argparse would exit on."""


def beam_option_parser() -> argparse.ArgumentParser:
    """A parser of every option any PipelineOptions class registers, raising `OptionRefused`
    instead of exiting.

    Built as Beam builds its own: `_BeamArgumentParser` (which takes Beam's value providers),
    and each options class's `_add_argparse_args`, both private; the classes found as
    PipelineOptions' subclasses, loaded ones only.
    """
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    class Parser(_BeamArgumentParser):
        def error(self, message):
            raise OptionRefused(message)

    parser = Parser(allow_abbrev=False, add_help=False)
    for cls in _option_classes():
        # A class may re-declare an option another already declared.
        with contextlib.suppress(argparse.ArgumentError):
            cls._add_argparse_args(parser)
    return parser


def _option_classes() -> list[type]:
    found: dict[str, type] = {}
    pending = list(PipelineOptions.__subclasses__())
    while pending:
        cls = pending.pop()
        found.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
        pending.extend(cls.__subclasses__())
    return list(found.values())


def beam_flags() -> list[str]:
    """Every `--flag` Beam's pipeline options know, in declaration order."""
    return [s for s in option_strings(beam_option_parser()) if s.startswith("--")]
