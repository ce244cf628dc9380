"""The sbatch command line the wrapper runs: what the user asked, plus only what is missing.

Pure: reads option lists (the command line and the script's `#SBATCH` lines), returns an
argument list. Options the user gives pass through untouched and in order; the wrapper
appends `--qos`, `--gres`, `--partition`, `--time` only when neither the command line nor an
`#SBATCH` line sets them, and one `--comment` carrying the user's comment plus the tags
(sbatch keeps the last `--comment`, and command-line options override `#SBATCH` lines).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slurmgpu.errors import UsageError
from slurmgpu.model.policy import TAG_PATTERN

# sbatch's short options that take a value (sbatch --help, Slurm 22.05).
SHORT_WITH_VALUE = set("aABbcCDdeFGiJLMmNnopqStwx")
# The long options (and short aliases) whose presence the wrapper must notice.
_WATCHED = {
    "--partition": "partition",
    "-p": "partition",
    "--time": "time",
    "-t": "time",
    "--qos": "qos",
    "-q": "qos",
    "--comment": "comment",
    "--gres": "gres",
    "--gpus": "gpus",
    "-G": "gpus",
    "--gpus-per-node": "gpus",
    "--gpus-per-task": "gpus",
    "--gpus-per-socket": "gpus",
    "--account": "account",
    "-A": "account",
    "--wrap": "wrap",
    "--open-mode": "open_mode",
}
# Flags (no value) the wrapper must notice: key, value.
_FLAGS = {"--requeue": ("requeue", "1"), "--no-requeue": ("requeue", "0")}
# sbatch's input environment variables for the watched options (sbatch(1) "INPUT ENVIRONMENT
# VARIABLES"; the names are in sbatch 22.05 and 25.11 alike): a value there is a request as
# much as the option is. sbatch ranks them above #SBATCH lines, below the command line.
# Slurm 26.05 rejects `--gres=gpu:N` together with `--gpus-per-node`, so the wrapper must see
# an exported SBATCH_GPUS_PER_NODE before it adds a kind's --gres.
ENV_OPTIONS = {
    "SBATCH_GPUS": "--gpus",
    "SBATCH_GPUS_PER_NODE": "--gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "--gpus-per-task",
    "SBATCH_GPUS_PER_SOCKET": "--gpus-per-socket",
    "SBATCH_GRES": "--gres",
    "SBATCH_PARTITION": "--partition",
    "SBATCH_QOS": "--qos",
    "SBATCH_TIMELIMIT": "--time",
    "SBATCH_OPEN_MODE": "--open-mode",
}
_ENV_FLAGS = {"SBATCH_REQUEUE": "--requeue", "SBATCH_NO_REQUEUE": "--no-requeue"}


def env_options(environ: Mapping[str, str]) -> list[str]:
    """The watched sbatch options that `environ`'s SBATCH_* variables set, as arguments."""
    out = [f"{opt}={environ[name]}" for name, opt in ENV_OPTIONS.items() if environ.get(name)]
    out += [flag for name, flag in _ENV_FLAGS.items() if name in environ]
    return out


_TAG = re.compile(TAG_PATTERN)


class SbatchOptions:
    """The watched options found in a list of sbatch arguments (last occurrence wins)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def has_gpu_request(self) -> bool:
        gres = self.values.get("gres", "")
        return "gpu" in gres or "shard" in gres or "npu" in gres or "gpus" in self.values


def scan_options(args: Sequence[str]) -> SbatchOptions:
    """Find the watched options in sbatch arguments (`-p gpu`, `-pgpu`, `--time=10`)."""
    found = SbatchOptions()
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in _FLAGS:
            key, value = _FLAGS[arg]
            found.values[key] = value
            continue
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            key = _WATCHED.get(name)
            if key is None:
                continue
            if not eq:
                if i >= len(args):
                    raise UsageError(f"sbatch option {name} needs a value")
                value = args[i]
                i += 1
            found.values[key] = value
        elif arg.startswith("-") and len(arg) > 1:
            letter = arg[1]
            if letter not in SHORT_WITH_VALUE:
                continue  # a flag such as -H, -Q (flags do not combine with values here)
            value = arg[2:]
            if not value:
                if i >= len(args):
                    raise UsageError(f"sbatch option -{letter} needs a value")
                value = args[i]
                i += 1
            key = _WATCHED.get(f"-{letter}")
            if key is not None:
                found.values[key] = value.lstrip("=")
    return found


def script_directives(script_text: str) -> list[str]:
    """The arguments of a batch script's `#SBATCH` lines, as sbatch reads them.

    sbatch reads `#SBATCH` lines from the top of the script until the first line that is
    neither blank nor a comment; a trailing `# comment` on a directive line is ignored.
    """
    args: list[str] = []
    for number, line in enumerate(script_text.splitlines()):
        stripped = line.strip()
        if number == 0 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if stripped.startswith("#SBATCH"):
            body = stripped[len("#SBATCH") :]
            try:
                args.extend(shlex.split(body, comments=True))
            except ValueError as exc:
                raise UsageError(f"script line {number + 1}: cannot parse #SBATCH: {exc}") from exc
    return args


def tags_in(comment: str | None) -> dict[str, str]:
    """The tier/kind tags in a comment (the first of each)."""
    out: dict[str, str] = {}
    for m in _TAG.finditer(comment or ""):
        out.setdefault(m.group(1), m.group(2))
    return out


def with_tags(comment: str | None, tags: dict[str, str]) -> str:
    """The user's comment with `tier=... kind=...` added (tags already there are kept)."""
    present = tags_in(comment)
    extra = [f"{k}={v}" for k, v in tags.items() if present.get(k) != v]
    parts = [comment.strip()] if comment and comment.strip() else []
    return " ".join([*parts, *extra])


@dataclass(frozen=True)
class Additions:
    """What the wrapper adds to the user's sbatch request."""

    qos: str | None = None
    gres: str | None = None
    partition: str | None = None
    time_limit_min: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # the job's tier is requeued when preempted: --requeue, and output appended across runs
    requeued_tier: str | None = None


def build_argv(
    sbatch: str,
    user_args: Sequence[str],
    script_args: Sequence[str],
    directives: Iterable[str],
    add: Additions,
) -> list[str]:
    """`[sbatch, *user_args, *additions, *script_args]` adding only what nobody set."""
    given = scan_options([*directives, *user_args])  # command line wins, as in sbatch
    out = [sbatch, *user_args]
    if add.qos and given.get("qos") is None:
        out.append(f"--qos={add.qos}")
    if add.gres and not given.has_gpu_request():
        # next to a non-GPU --gres (sbatch keeps the last --gres), never in place of it
        own = given.get("gres")
        out.append(f"--gres={own},{add.gres}" if own else f"--gres={add.gres}")
    if add.partition and given.get("partition") is None:
        out.append(f"--partition={add.partition}")
    if add.time_limit_min and given.get("time") is None:
        out.append(f"--time={add.time_limit_min}")
    if add.requeued_tier:
        if given.get("requeue") == "0":
            raise UsageError(
                f"tier {add.requeued_tier} jobs are requeued when preempted: "
                "--no-requeue cannot be used in it"
            )
        if given.get("requeue") is None:
            out.append("--requeue")
        if given.get("open_mode") is None:
            # a rerun must not truncate the output of the run before it
            out.append("--open-mode=append")
    if add.tags:
        comment = given.get("comment")
        present = tags_in(comment)
        for key, value in add.tags.items():
            if key in present and present[key] != value:
                raise UsageError(
                    f"the job comment says {key}={present[key]} but --{key} {value} was asked"
                )
        merged = with_tags(comment, add.tags)
        if merged != (comment or ""):
            out.append(f"--comment={merged}")
    out.extend(script_args)
    return out
