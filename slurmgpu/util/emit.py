"""The one way a command writes a generated file, shows its diff, or hands it over.

Every command that writes a file it generated (gen-gres, gen-topology, gen-job-submit, mig
plan -o, mig apply, rebalance apply) goes through `emit`, so they all behave the same:

- `-` as the output: the text to stdout (checked first when asked), status 0;
- `diff=True`: a unified diff against the file, nothing written;
- `dry_run=True`: what would be written (`would write PATH` or `PATH: unchanged`) and the
  diff, nothing written;
- `emit_dir=DIR`: the new file and the diff are written into DIR (for Ansible/Salt/git),
  the live file is left alone (`emit_files`, also for several files at once);
- else: `PATH: unchanged` when it already holds the text (not rewritten, no backup), or the
  file is written atomically (`write_atomic`: validated, `PATH.bak`, rename).

The status follows the one exit-code convention (EXIT_*, docs/acting.md "Exit codes"): 0
when the live file is (or would stay) as generated, EXIT_CHANGED (3) when it was written or
would be (--diff, --dry-run, --emit); errors are 1, usage errors 2.

`check(text)` runs before anything is written anywhere and raises to stop (Slurm's parser,
Lua); it runs in every mode, so `--diff --check` and `--emit` check too.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmgpu.errors import OutputError, UsageError
from slurmgpu.util.atomic import read_existing, resolve_target, write_atomic

# The exit-code convention of every command that writes, shows or hands over generated
# files or changes the cluster's configuration (docs/acting.md, "Exit codes"), so that a
# config-management run can tell "changed" from "unchanged" and both from a failure:
EXIT_UNCHANGED = 0  # nothing changed, or nothing would change
EXIT_ERROR = 1  # a SlurmgpuError (its exit_code)
EXIT_USAGE = 2  # a UsageError: the request cannot be done as asked
EXIT_CHANGED = 3  # something changed (apply, write) or would change (--diff, --dry-run, plan)


def changed_status(changed: bool) -> int:
    """EXIT_CHANGED when something changed or would change, else EXIT_UNCHANGED."""
    return EXIT_CHANGED if changed else EXIT_UNCHANGED


DIFF_NAME = "changes.diff"
# gen-gres --node-line --emit DIR: the slurm.conf node definition beside gres.conf
NODE_DEFINITION_NAME = "slurm-node.conf"
STEPS_NAME = "steps.txt"


@dataclass(frozen=True)
class FileChange:
    """One generated file: where it lives, what it holds now (None: absent), its new text."""

    path: Path
    new: str
    old: str | None

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def diff(self, label: str | None = None) -> str:
        name = label or str(self.path)
        return "".join(
            difflib.unified_diff(
                (self.old or "").splitlines(keepends=True),
                self.new.splitlines(keepends=True),
                fromfile=name if self.old is not None else "/dev/null",
                tofile=name,
            )
        )


def change_of(path: str | Path, text: str) -> FileChange:
    """The change writing `text` to `path` would make (a FIFO, device or directory there is
    refused before it is opened: reading one could block)."""
    resolve_target(path)
    return FileChange(Path(path), text, read_existing(path))


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")


def emit(
    text: str,
    output: str | Path,
    *,
    check: Callable[[str], None] | None = None,
    diff: bool = False,
    backup: bool = True,
    mode: int | None = None,
    dry_run: bool = False,
    emit_dir: str | Path | None = None,
) -> int:
    """Write (or show, or hand over) one generated file; return the command's exit status."""
    if str(output) == "-":
        if diff or dry_run or emit_dir is not None:
            raise UsageError("--diff, --dry-run and --emit need --output PATH (the live file)")
        if check is not None:
            check(text)
        sys.stdout.write(text)
        return EXIT_UNCHANGED
    change = change_of(output, text)
    if check is not None:
        check(text)
    if emit_dir is not None:
        emit_files(emit_dir, [change])
        return changed_status(change.changed)
    if diff or dry_run:
        sys.stdout.write(change.diff())
        if not change.changed:
            _say(f"{output}: unchanged")
        elif dry_run:
            _say(f"would write {output} (dry run: nothing written)")
        return changed_status(change.changed)
    if not change.changed:
        _say(f"{output}: unchanged")
        return EXIT_UNCHANGED
    kept = write_atomic(output, text, backup=backup, mode=mode)
    _say(f"wrote {output}" + (f" (previous kept as {kept})" if kept else ""))
    return EXIT_CHANGED


def emit_files(
    directory: str | Path, changes: Sequence[FileChange], steps: Sequence[str] = ()
) -> list[Path]:
    """Write each change's new text as DIR/<its file name>, their unified diff as
    DIR/changes.diff (from the live paths, so `patch -p0` or a review reads it as is) and,
    when given, the steps that make them live as DIR/steps.txt; return what was written."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise OutputError(f"--emit {target}: exists and is not a directory")
    names = [c.path.name for c in changes]
    if len(set(names)) != len(names):
        raise UsageError(f"--emit {target}: two files would have one name: {names}")
    for change in changes:
        if (target / change.path.name).resolve() == change.path.resolve():
            raise UsageError(
                f"--emit {target}: holds the live {change.path.name}; emit into another directory"
            )
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--emit {target}: cannot create it: {exc.strerror}") from None
    written = []
    for change in changes:
        path = target / change.path.name
        write_atomic(path, change.new, backup=False, mode=0o644)
        written.append(path)
    diff_path = target / DIFF_NAME
    write_atomic(diff_path, "".join(c.diff() for c in changes), backup=False, mode=0o644)
    written.append(diff_path)
    if steps:
        steps_path = target / STEPS_NAME
        write_atomic(steps_path, "".join(f"{s}\n" for s in steps), backup=False, mode=0o644)
        written.append(steps_path)
    differ = sum(c.changed for c in changes)
    _say(
        f"emitted {len(changes)} file(s) ({differ} changed) and {DIFF_NAME} into {target}; "
        "nothing live was touched"
    )
    return written


def emit_node_definition(directory: str | Path, text: str) -> Path:
    """`gen-gres --node-line --emit DIR`: the slurm.conf node definition as
    DIR/slurm-node.conf, beside the emitted gres.conf (a part of slurm.conf, so no diff of
    its own: config management puts it into slurm.conf)."""
    path = Path(directory) / NODE_DEFINITION_NAME
    write_atomic(path, text if text.endswith("\n") else text + "\n", backup=False, mode=0o644)
    _say(f"emitted the node definition for slurm.conf as {path}")
    return path
