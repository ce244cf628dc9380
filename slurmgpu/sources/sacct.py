"""Slurm accounting from the live cluster: `sacct` text (default) or `sacct --json`.

Query decisions (see docs/accounting.md):

- `-a -D -P` with an explicit `--format`: all users, every run of a requeued job (`-D`; without
  it only the last run is shown and Submit is reset), parsable output with a header.
- `-S` and `-E` are ALWAYS passed: sacct's default window is midnight-to-now, silently.
- No `-X`: utilization (`TRESUsageIn*`) lives only on step rows; the loader folds steps into
  their allocation.
- `TZ=UTC SLURM_TIME_FORMAT=%s`: times come out as epoch seconds, immune to the local zone and
  DST, and are the cheapest form to parse.
- Delimiter `\\x1f` (ASCII unit separator) instead of `|`: JobName/AdminComment/Comment are
  free text that may contain `|`, never a control character in practice.
- Text is the default; `--json` is opt-in: measured 4-6x slower end to end (firecrest-v2 PR
  #111; our own numbers in docs/accounting.md) and returned as one document, not a stream.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from slurmgpu.errors import SacctParseError, SlurmCommandError
from slurmgpu.util.proc import run

SACCT_FIELDS: tuple[str, ...] = (
    "JobIDRaw", "JobID", "Cluster", "Partition", "QOS", "Account", "User", "Submit",
    "Eligible", "Start", "End", "ElapsedRaw", "TimelimitRaw", "State", "NNodes", "ReqTRES",
    "AllocTRES", "NodeList", "TRESUsageInAve", "TRESUsageInMax", "ConsumedEnergyRaw",
    "Reason", "AdminComment",
    "Comment", "JobName",
)  # fmt: skip
DELIMITER = "\x1f"
SACCT_ENV = {"TZ": "UTC", "SLURM_TIME_FORMAT": "%s"}


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def sacct_argv(
    since: datetime,
    until: datetime,
    *,
    fields: Sequence[str] = SACCT_FIELDS,
    clusters: Sequence[str] = (),
    json: bool = False,
) -> list[str]:
    """The sacct command line for a window (times in UTC; sacct runs with TZ=UTC)."""
    argv = ["sacct", "-a", "-D", "-S", _stamp(since), "-E", _stamp(until)]
    if clusters:
        argv += ["-M", ",".join(clusters)]
    if json:
        return [*argv, "--json"]
    return [*argv, "-P", f"--delimiter={DELIMITER}", "--format", ",".join(fields)]


def sacct_text(
    since: datetime,
    until: datetime,
    *,
    env: Mapping[str, str] | None = None,
    clusters: Sequence[str] = (),
    timeout: float = 600.0,
) -> str:
    """Run sacct for the window and return its parsable text (header first)."""
    full_env = dict(env or {})
    full_env.update(SACCT_ENV)
    # sacct prints names in the bytes slurmdbd stored: not always UTF-8. surrogateescape keeps
    # every byte, and the loader re-encodes them and decodes non-UTF-8 lines as Latin-1.
    argv = sacct_argv(since, until, clusters=clusters)
    return run(argv, env=full_env, timeout=timeout, errors="surrogateescape").stdout


def sacct_json(
    since: datetime,
    until: datetime,
    *,
    env: Mapping[str, str] | None = None,
    clusters: Sequence[str] = (),
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Run `sacct --json` (22.05: dbv0.0.38 shape; 23.02+: data_parser) and decode it."""
    import json

    full_env = dict(env or {})
    # NOT SLURM_TIME_FORMAT=%s here: 22.05's --json path re-parses -S/-E through that format
    # and fails ("Invalid time specification"), returning `errors` and no jobs. JSON times are
    # epoch integers anyway.
    full_env["TZ"] = "UTC"
    argv = sacct_argv(since, until, clusters=clusters, json=True)
    out = run(argv, env=full_env, timeout=timeout).stdout
    try:
        doc = json.loads(out)
    except ValueError as exc:
        raise SlurmCommandError(f"sacct --json: output is not JSON ({exc})") from exc
    errors = doc.get("errors") or []
    if errors:
        first = errors[0]
        detail = first.get("description") or first.get("error") or str(first)
        raise SlurmCommandError(f"sacct --json reported {len(errors)} error(s): {detail}")
    return doc


class _KeyTwice(Exception):
    """A JSON object with a key given twice (json.loads keeps the last one silently)."""


def _no_key_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _KeyTwice(key)
            seen.add(key)
    return out


def json_dump_records(data: bytes, name: str) -> Iterator[dict[str, str]]:
    """The rows of a saved `sacct --json` document (`sacct --json ... > dump.json`), checked
    like the live query's: JSON, an object with a `jobs` list, no `errors` entries."""
    import json

    try:
        doc = json.loads(data.decode("utf-8-sig"), object_pairs_hook=_no_key_twice)
    except _KeyTwice as exc:
        raise SacctParseError(
            f"{name}: key {exc.args[0]!r} appears twice in one object of the sacct --json "
            "document (which value is meant is not known)"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise SacctParseError(f"{name}: not a sacct --json document ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SacctParseError(f"{name}: a sacct --json document has a `jobs` list; this has none")
    errors = doc.get("errors") or []
    if errors:
        first = errors[0]
        detail = (
            (first.get("description") or first.get("error")) if isinstance(first, dict) else first
        )
        raise SacctParseError(f"{name}: sacct --json reported {len(errors)} error(s): {detail}")
    try:
        return iter(list(json_records(doc)))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise SacctParseError(f"{name}: a job record of an unexpected shape ({exc!r})") from None


# ----------------------------------------------------------------------- JSON -> sacct columns


def _number(value: Any) -> Any:
    """`{"set": true, "number": 5}` (v0.0.40+ NO_VAL wrapper) -> 5; unset/infinite -> None."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return "UNLIMITED"
        if not value.get("set", True):
            return None
        return value.get("number")
    return value


def _time(value: Any) -> str:
    v = _number(value)
    if v in (None, 0, "UNLIMITED"):
        return "Unknown"
    if isinstance(v, float) and math.isfinite(v):
        return str(int(v))
    # anything else as its text, which the loader's time parser takes in ASCII digits only or
    # rejects with the row (int() read "٣" as 3, and Infinity was an OverflowError)
    return str(v)


def _tres(items: Any) -> str:
    """`[{"type": "gres", "name": "gpu", "count": 2}, ...]` -> `gres/gpu=2,...`."""
    parts = []
    for item in items or []:
        if _number(item.get("count")) is None:
            continue  # `energy` with a null count, unset counters
        name = item.get("name") or ""
        key = f"{item['type']}/{name}" if name else str(item["type"])
        parts.append(f"{key}={_number(item.get('count'))}")
    return ",".join(parts)


def _steps_energy(steps: Any) -> str:
    """The job's energy as sacct's text prints ConsumedEnergyRaw on the allocation row: the
    sum of its steps' `energy` TRES in `tres.requested.total` (TRESUsageInTot; 22.05-25.11
    give `{"type": "energy", "id": 3, "count": N}` there, 0 without an energy plugin)."""
    total = 0
    for step in steps or []:
        used = ((step.get("tres") or {}).get("requested") or {}).get("total") or []
        for item in used:
            count = _number(item.get("count")) if isinstance(item, dict) else None
            if isinstance(count, int) and 0 < count < 2**63 and item.get("type") == "energy":
                total += count  # (NO_VAL64 and above: never set)
    return str(total)


def _state(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value or "")


# `sacct --json` shapes this reader was checked against, each recorded from the real release
# (tests/data/sacct/slurm-*-harness.json): 22.05 `openapi/dbv0.0.38`, 24.11
# `data_parser/v0.0.42`, 25.11 `data_parser/v0.0.44` (v0.0.40+ wrap numbers as
# {"set", "infinite", "number"}; 26.05's v0.0.45 adds `jobs[].sluid`, read as a SLUID column).
JSON_SCHEMAS_CHECKED = ("dbv0.0.38", "v0.0.42", "v0.0.44")


def json_schema(doc: Mapping[str, Any]) -> str:
    """The schema of a `sacct --json` document: `dbv0.0.38`, `v0.0.44`, ... ("" unknown)."""
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    text = str(plugin.get("data_parser") or plugin.get("type") or "")
    m = re.search(r"(dbv|v)(\d+\.\d+\.\d+)$", text)
    return f"{m.group(1)}{m.group(2)}" if m else ""


def json_records(doc: Mapping[str, Any]) -> Iterator[dict[str, str]]:
    """Rows in sacct's column names from a `sacct --json` document (jobs, then their steps)."""
    for job in doc.get("jobs", []):
        raw = str(job["job_id"])
        array = job.get("array") or {}
        het = job.get("het") or {}
        task = _number(array.get("task_id"))
        offset = _number(het.get("job_offset"))
        if _number(array.get("job_id")) and task is not None:
            job_id = f"{_number(array['job_id'])}_{task}"
        elif _number(het.get("job_id")) and offset is not None:
            job_id = f"{_number(het['job_id'])}+{offset}"
        else:
            job_id = raw
        t = job.get("time") or {}
        tres = job.get("tres") or {}
        comment = job.get("comment") or {}
        limit = _number(t.get("limit"))
        record = {
            "JobIDRaw": raw,
            "JobID": job_id,
            "Cluster": job.get("cluster") or "",
            "Partition": job.get("partition") or "",
            "QOS": job.get("qos") or "",
            "Account": job.get("account") or "",
            "User": job.get("user") or "",
            "Submit": _time(t.get("submission")),
            "Start": _time(t.get("start")),
            "End": _time(t.get("end")),
            "ElapsedRaw": str(_number(t.get("elapsed")) or 0),
            "TimelimitRaw": "" if limit is None else str(limit),
            "State": _state(job.get("state")),
            "AllocTRES": _tres(tres.get("allocated")),
            "ReqTRES": _tres(tres.get("requested")),
            "NodeList": job.get("nodes") or "",
            "AdminComment": comment.get("administrator") or "",
            "Comment": comment.get("job") or "",
            "JobName": job.get("name") or "",
        }
        sluid = job.get("sluid") or (job.get("step_id") or {}).get("sluid")
        if sluid:  # 26.05's v0.0.45 (`jobs[].sluid`): the job's lifetime-unique id
            record["SLUID"] = str(sluid)
        record["ConsumedEnergyRaw"] = _steps_energy(job.get("steps", []))
        yield record
        for step in job.get("steps", []):
            sid = (step.get("step") or {}).get("id")
            sid = str(sid.get("name") if isinstance(sid, dict) else sid)
            if "." not in sid:  # v0.0.38 gives the step name alone
                sid = f"{raw}.{(step.get('step') or {}).get('name', sid)}"
            st = step.get("time") or {}
            req = (step.get("tres") or {}).get("requested") or {}
            yield {
                "JobIDRaw": sid,
                "JobID": sid,
                "Cluster": record["Cluster"],
                "Start": _time(st.get("start")),
                "End": _time(st.get("end")),
                "ElapsedRaw": str(_number(st.get("elapsed")) or 0),
                "State": _state(step.get("state")),
                "AllocTRES": _tres((step.get("tres") or {}).get("allocated")),
                # naming trap: tres/requested/* is TRESUsageIn*, tres/consumed/* is TRESUsageOut*
                "TRESUsageInAve": _tres(req.get("average")),
                "TRESUsageInMax": _tres(req.get("max")),
            }
