"""The one error path of every `slurmgpu` command: what a failure prints, and its exit code.

- a usage mistake (click's `UsageError`, slurmgpu's `UsageError`): one line, exit 2;
- an expected failure (a `SlurmgpuError`; the file system saying no: missing, read-only or
  full disk, a directory where a file belongs; undecodable text; a truncated or corrupt gzip;
  input nested too deeply; numbers too long or dates out of range): one line, exit 1;
- anything else is a bug in slurmgpu: the traceback, then one line saying so, exit 70
  (EX_SOFTWARE in sysexits.h), so a bug never looks like a user mistake and vice versa.

Every line starts with `slurmgpu: error: ` and holds no newline, so scripts can grep it.
"""

from __future__ import annotations

import errno
import lzma
import sys
import traceback
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import click

from slurmgpu.errors import PolicyError, SlurmgpuError

BUG_EXIT = 70
_MAX_LINE = 400  # a message quoting hostile input is cut, never allowed to run on for pages


def one_line(message: str) -> str:
    """`message` flattened to one printable line (control characters shown escaped)."""
    text = flat(message)
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


def fail(message: str, code: int) -> click.exceptions.Exit:
    """Print the one error line; return the `Exit` to raise (click exits with `code`)."""
    click.echo(f"slurmgpu: error: {one_line(message)}", err=True)
    return click.exceptions.Exit(code)


def describe_os_error(exc: OSError) -> str:
    """`PATH: reason` in the words of strerror (`No space left on device`, `Is a directory`)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None and exc.filename2 is not None:
        return f"{exc.filename} -> {exc.filename2}: {reason}"
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    return reason


def flat(message: str) -> str:
    """`message` on one printable line (control characters shown escaped), never cut."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message.strip())


def expected_failure(exc: BaseException) -> str | None:
    """The message for a failure a user can cause and fix, or None for a bug.

    A policy with several problems prints each on its own `slurmgpu: policy:` line first, in
    full (issue #20: joined on one line, the 400-character cut hid the fourth), and the one
    error line counts them."""
    if isinstance(exc, PolicyError) and len(exc.problems) > 1:
        for problem in exc.problems:
            click.echo(f"slurmgpu: policy: {flat(problem)}", err=True)
        return f"the policy has {len(exc.problems)} problems (each on a line above)"
    if isinstance(exc, SlurmgpuError):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError):  # includes gzip.BadGzipFile
        return describe_os_error(exc)
    if isinstance(exc, EOFError):
        return f"input ends early (truncated or corrupt compressed file?): {exc}"
    if isinstance(exc, zlib.error | lzma.LZMAError):
        return f"corrupt compressed input: {exc}"
    if isinstance(exc, RecursionError):
        return "input is nested too deeply to read"
    if isinstance(exc, OverflowError):
        return f"a value is out of range: {exc}"
    if isinstance(exc, MemoryError):
        return "out of memory (input too large, or a range that expands too far)"
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return "a number in the input has too many digits"
    return None


@contextmanager
def handled_errors() -> Iterator[None]:
    """Turn every failure below into one `slurmgpu: error:` line and click's `Exit`."""
    try:
        yield
    except (click.exceptions.Exit, click.exceptions.NoArgsIsHelpError, KeyboardInterrupt):
        raise
    except click.UsageError as exc:
        where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        raise fail(f"{where}{exc.format_message()}{hint}", exc.exit_code) from None
    except click.ClickException as exc:
        raise fail(exc.format_message(), exc.exit_code) from None
    except click.Abort:
        raise fail("aborted", 1) from None
    except Exception as exc:  # the one place that decides what is a bug
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            raise  # a closed pipe (`| head`): click's main() silences it
        message = expected_failure(exc)
        if message is not None:
            raise fail(message, getattr(exc, "exit_code", 1)) from None
        traceback.print_exc(file=sys.stderr)
        raise fail(
            f"internal error, a bug in slurmgpu ({type(exc).__name__}): please report it "
            "with the traceback above",
            BUG_EXIT,
        ) from None
