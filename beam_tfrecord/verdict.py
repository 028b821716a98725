"""A build's verdict: published, withdrawn (and why), or published incomplete, with its exit code
and its one-line message, decided once from what became of the inputs."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from beam_tfrecord.wording import count, nearest

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_OK",
    "BuildFailed",
    "Counts",
    "Verdict",
    "Withdrawal",
    "decide",
    "left_out_labels",
    "of_published",
    "skipped_fraction",
    "too_many_skipped",
]

# The command's exit codes: a build that published, one that did not (or published incomplete),
# and a config that cannot work (nothing was written).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2


class BuildFailed(Exception):
    """A build that ran but must not be published: its one-line reason, for the command line.

    Attributes:
        resumable: the shards the build finished are kept in its output, and the build again
            with `resume=True` (`--resume`) keeps them rather than writing them again: with
            settings that let it pass (a looser `max_skipped_fraction`, `classes` corrected or
            `allow_missing_classes=True`), or as it was where `retry` is true.
        retry: what stopped it may pass: a file or object it could not read or write (a
            store's trouble), or inputs the runner lost between stages. With `resumable`, the
            same build with `resume=True` goes on from the shards it finished; without (it
            stopped before writing any), the same build is run again.
        withdrawal: why a build that ran to its end was withdrawn, a `Withdrawal`:
            `"no_image"`, `"too_many_skipped"`, `"missing_classes"` or `"unaccounted"`; None
            for a build stopped by a file or object it could not read or write.
    """

    exit_code = EXIT_FAILED

    def __init__(
        self,
        message: str,
        *,
        resumable: bool = False,
        retry: bool = False,
        withdrawal: Withdrawal | None = None,
    ):
        super().__init__(message)
        self.resumable = resumable
        self.retry = retry
        self.withdrawal = withdrawal

    def for_python(self) -> BuildFailed:
        """The same failure as a Python caller reads it: the settings it names as BuildConfig's
        fields (`allow_missing_classes=True`), not as flags (`--allow-missing-classes`)."""
        from beam_tfrecord.settings import in_python_names

        return BuildFailed(
            in_python_names(str(self)),
            resumable=self.resumable,
            retry=self.retry,
            withdrawal=self.withdrawal,
        )


class Withdrawal(str, enum.Enum):
    """Why a build was withdrawn: it publishes nothing, and leaves its report.jsonl."""

    NO_IMAGE = "no_image"  # nothing to publish; no shard is kept
    TOO_MANY_SKIPPED = "too_many_skipped"  # more than --max-skipped-fraction; shards kept
    MISSING_CLASSES = "missing_classes"  # --classes names a class no input has; shards kept
    # Inputs listed but neither written nor reported (the runner lost them); shards kept.
    UNACCOUNTED = "unaccounted"


def skipped_fraction(inputs: Mapping[str, int]) -> float:
    """The share of a build's inputs (the manifest's `inputs`) it skipped; 0 when none listed."""
    return inputs["skipped"] / inputs["listed"] if inputs["listed"] else 0.0


def too_many_skipped(inputs: Mapping[str, int], max_skipped_fraction: float | None) -> bool:
    """Whether a build skipped more of its inputs (the manifest's `inputs`) than it may."""
    return max_skipped_fraction is not None and skipped_fraction(inputs) > max_skipped_fraction


@dataclass(frozen=True)
class Counts:
    """What became of a build's inputs, as far as it is known.

    `listed` and `written` are None where they cannot be known: a runner that reports no
    metrics leaves a withdrawn build only its report.jsonl and its finished shards to go by.
    """

    listed: int | None
    written: int | None
    skipped_by_reason: Mapping[str, int] = field(default_factory=dict)
    recorded_unaccounted: int | None = None  # as a manifest's `inputs` has it

    @classmethod
    def of(cls, inputs: Mapping) -> Counts:
        """From a manifest's `inputs`."""
        return cls(
            inputs["listed"],
            inputs["written"],
            dict(inputs["skipped_by_reason"]),
            inputs.get("unaccounted"),
        )

    @property
    def skipped(self) -> int:
        return sum(self.skipped_by_reason.values())

    @property
    def unaccounted(self) -> int:
        """Listed inputs neither written nor reported (0 when that cannot be known)."""
        if self.recorded_unaccounted is not None:
            return self.recorded_unaccounted
        if self.listed is None or self.written is None:
            return 0
        return self.listed - self.written - self.skipped


@dataclass(frozen=True)
class Verdict:
    """What a build comes to: published (`withdrawal` None), or withdrawn and why.

    `incomplete`: published, but its books do not balance (a manifest whose `unaccounted` is
    not 0: written by a build before the finalize step withheld such builds).
    """

    counts: Counts
    max_skipped_fraction: float | None = None
    withdrawal: Withdrawal | None = None
    missing_classes: tuple[str, ...] = ()
    incomplete: bool = False

    @property
    def published(self) -> bool:
        return self.withdrawal is None

    @property
    def succeeded(self) -> bool:
        return self.published and not self.incomplete

    @property
    def keeps_shards(self) -> bool:
        """Whether the finished shards stay in the folder of a withdrawn build, for --resume."""
        return self.withdrawal not in (None, Withdrawal.NO_IMAGE)

    @property
    def resumable(self) -> bool:
        """Whether `--resume` keeps the shards the build finished (with settings that let it
        pass: a looser bound, --classes corrected or --allow-missing-classes; or as they were,
        where the runner lost inputs): every withdrawn build that keeps them."""
        return self.keeps_shards

    @property
    def retry(self) -> bool:
        """Whether the same build with `--resume` may pass (the runner's loss may not recur)."""
        return self.withdrawal is Withdrawal.UNACCOUNTED

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.succeeded else EXIT_FAILED

    def to_json(self) -> str:
        """The verdict as the finalize step hands it to the launcher (a Beam metric)."""
        return json.dumps(
            {
                "withdrawal": self.withdrawal.value if self.withdrawal else None,
                "listed": self.counts.listed,
                "written": self.counts.written,
                "skipped_by_reason": dict(sorted(self.counts.skipped_by_reason.items())),
                "missing_classes": list(self.missing_classes),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, max_skipped_fraction: float | None) -> Verdict:
        fields = json.loads(text)
        return cls(
            Counts(fields["listed"], fields["written"], fields["skipped_by_reason"]),
            max_skipped_fraction,
            Withdrawal(fields["withdrawal"]) if fields["withdrawal"] else None,
            tuple(fields["missing_classes"]),
        )

    def message(self, report_url: str, hint: str = "") -> str:
        """The one line the command prints after `error: `; `hint`, the labels --classes left
        out (`left_out_labels`), for a build given --classes."""
        if self.withdrawal is None:
            return self._incomplete_message() if self.incomplete else ""
        return {
            Withdrawal.NO_IMAGE: self._no_image_message,
            Withdrawal.TOO_MANY_SKIPPED: self._too_many_message,
            Withdrawal.MISSING_CLASSES: self._missing_classes_message,
            Withdrawal.UNACCOUNTED: self._unaccounted_message,
        }[self.withdrawal](report_url, hint)

    def failure(self, report_url: str, hint: str = "") -> BuildFailed:
        """The BuildFailed a withdrawn build raises."""
        return BuildFailed(
            self.message(report_url, hint),
            resumable=self.resumable,
            retry=self.retry,
            withdrawal=self.withdrawal,
        )

    def _reasons(self) -> str:
        return ", ".join(f"{r}: {n}" for r, n in sorted(self.counts.skipped_by_reason.items()))

    def _no_image_message(self, url: str, hint: str) -> str:
        if not self.counts.skipped:
            return (
                "no image was written and no input was reported: none was listed, or the runner "
                "lost them between stages; nothing was published"
            )
        return (
            f"no image was written: {count(self.counts.skipped, 'input')} "
            f"{'was' if self.counts.skipped == 1 else 'were'} reported "
            f"({self._reasons()}); nothing was published, see {url}{hint}"
        )

    def _too_many_message(self, url: str, hint: str) -> str:
        skipped, listed = self.counts.skipped, self.counts.listed
        share = f" ({skipped / listed:.1%})" if listed else ""
        of = f" of {listed}" if listed else ""
        return (
            f"{skipped}{of} inputs{share} {'was' if skipped == 1 else 'were'} skipped "
            f"({self._reasons()}), more than --max-skipped-fraction "
            f"{self.max_skipped_fraction:g} allows; nothing was published (the finished shards "
            f"are kept), see {url}{hint}"
        )

    def _missing_classes_message(self, url: str, hint: str) -> str:
        # Most often the names are typos of the labels --classes left out (`hint`).
        missing = self.missing_classes
        one = len(missing) == 1
        named = ", ".join(repr(name) for name in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        return (
            f"--classes names {count(len(missing), 'class', 'classes')} no input is labelled "
            f"with: {named}{more}; nothing was published (the finished shards are kept), see "
            f"{url}{hint}. Correct --classes (and build with --overwrite), or pass "
            f"--allow-missing-classes to publish {'it' if one else 'them'} with no image "
            "(--resume keeps the finished shards)"
        )

    def _unaccounted_message(self, url: str, hint: str) -> str:
        lost, listed = self.counts.unaccounted, self.counts.listed or 0
        how_many = (
            f"{lost} of {count(listed, 'listed input')} {'was' if lost == 1 else 'were'}"
            if lost > 0 and self.counts.written
            else "inputs were"
        )
        return (
            f"{how_many} neither written nor reported: the runner lost them between stages; "
            f"nothing was published (the finished shards are kept), see {url}. Build again "
            "with --resume (the DirectRunner's in_memory mode, a local build's default, does "
            "not lose data)"
        )

    def _incomplete_message(self) -> str:
        lost, listed = self.counts.unaccounted, self.counts.listed or 0
        return (
            f"{lost} of {count(listed, 'listed input')} {'was' if lost == 1 else 'were'} "
            "neither written nor reported: the runner lost them between stages. The shards are "
            "incomplete; build again (the DirectRunner's in_memory mode does not lose data)"
        )


def decide(
    counts: Counts,
    max_skipped_fraction: float | None = None,
    missing_classes: Sequence[str] = (),
    *,
    withdrawn: bool = False,
) -> Verdict:
    """The verdict on a build whose inputs came to `counts`.

    In order: a build that wrote no image is withdrawn (an empty dataset published as finished
    would pass for a build that worked); then one that skipped more than
    `max_skipped_fraction` of its inputs (an unknown `listed` counts as too many, when a bound
    is set); then one whose --classes names classes no input has (`missing_classes`, given only
    when the build may not publish them), most often a typo that dropped their images; then one
    whose books do not balance. `withdrawn`: the build is known to have been withdrawn (no
    manifest.json), so counts that would pass mean its books did not balance, with its losses
    where the counts do not show them.
    """

    def verdict(withdrawal: Withdrawal | None) -> Verdict:
        return Verdict(counts, max_skipped_fraction, withdrawal, tuple(missing_classes))

    if counts.written == 0:
        return verdict(Withdrawal.NO_IMAGE)
    if max_skipped_fraction is not None and (
        counts.listed is None
        or too_many_skipped({"listed": counts.listed, "skipped": counts.skipped},
                            max_skipped_fraction)
    ):  # fmt: skip
        return verdict(Withdrawal.TOO_MANY_SKIPPED)
    if missing_classes:
        return verdict(Withdrawal.MISSING_CLASSES)
    if counts.unaccounted or withdrawn:
        return verdict(Withdrawal.UNACCOUNTED)
    return verdict(None)


def of_published(inputs: Mapping) -> Verdict:
    """The verdict on a published build, from its manifest's `inputs`: incomplete if its books
    do not balance."""
    counts = Counts.of(inputs)
    return Verdict(counts, incomplete=bool(inputs.get("unaccounted", 0)))


# Labels a withdrawn build's message names, of the inputs --classes left out.
_UNKNOWN_LABELS_NAMED = 5


def left_out_labels(unknown: Mapping[str, int], classes: Sequence[str]) -> str:
    """`; --classes left out the labels 'banana' (31 inputs, did you mean it for 'banan'?)...`:
    the most common labels of the inputs skipped as unknown_class (`unknown`, label -> inputs),
    each with the --classes name that mistypes it, if one is close."""
    if not unknown:
        return ""
    named = []
    unused = [name for name in classes if name not in unknown]  # the names a label may mistype
    for label, inputs in sorted(unknown.items(), key=lambda item: (-item[1], item[0])):
        if len(named) == _UNKNOWN_LABELS_NAMED:
            break
        meant = nearest(label, unused)
        typo = f"; --classes has {meant!r}: a typo?" if meant else ""
        named.append(f"{label!r} ({count(inputs, 'input')}{typo})")
    more = len(unknown) - len(named)
    return (
        f"; --classes left out the label{'s' if len(unknown) > 1 else ''} "
        + ", ".join(named)
        + (f" and {more} more" if more else "")
    )
