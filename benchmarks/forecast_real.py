"""Forecast accuracy on real per-minute GPU demand series (docs/forecast.md, "How good is it").

The data is not in this repository; it is read from the paths given:

- `--helios-dir DIR`: SenseTime Helios, cluster Earth, May 2020, per minute, one file per
  virtual cluster (a Slurm partition): `DIR/earth-<vc>-sequence.csv`, copies of
  "analysis/2_cluster characterization/Earth_vcs/<vc>/cluster_sequence_vc.csv" of
  https://github.com/S-Lab-System-Group/HeliosArtifact (columns time, running_gpu_num,
  pending_gpu_num, ...). Demand = running_gpu_num + pending_gpu_num, one series per VC.
- `--philly FILE`: Microsoft Philly, 2017-10-03 .. 2017-12-15, active nodes per minute
  ("framework/CES Service/data/philly_node_sequence.csv" of the same repository; columns
  time, active, total). One series, `philly`, in nodes (not GPUs): a real demand-like
  per-minute series of a GPU cluster, not a partition's GPUs.

and the public Alibaba cluster traces (https://github.com/alibaba/clusterdata, CC-BY 4.0):

- `--openb cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv`: GPU pods of a cluster
  (creation, scheduled and deletion times in seconds, num_gpu, gpu_milli = share of a GPU,
  qos). One series per qos class with at least 100 pods (LS, BE, Burstable), from the first
  whole day of the trace's dense part (the file lists only the pods that survived into its
  last ~34 days before that, so earlier demand is not the cluster's).
- `--dlrm cluster-trace-gpu-v2025/disaggregated_DLRM_trace.csv`: instances of a
  disaggregated recommendation-model serving cluster (role HN holds one GPU each, CN none;
  a blank creation time: created before the trace, a blank deletion time: alive at its
  end). One series for all HN instances (`HN`) and one per app among the `--top-apps` with
  the most instances created during the trace (an app whose instances all predate it is a
  constant).

Demand at an instant = GPUs held by running pods (scheduled .. deletion) + GPUs requested by
pending ones (creation .. scheduled, or .. deletion for a pod never scheduled), averaged
exactly over each minute (`demand.bucket_average`). The traces' clocks start at 0
(anonymized): they are placed at an arbitrary Monday 00:00 UTC (`T0`), so the day of the
week and the hour of the day are the trace's own offsets, not the site's calendar.

    python benchmarks/forecast_real.py build [--helios-dir D] [--philly F] [--openb F]
                                             [--dlrm F] [--out DIR]
    python benchmarks/forecast_real.py eval DIR/openb.csv [--first-cut-day 21] [--label L]
    python benchmarks/forecast_real.py --table benchmarks/out/forecast_real-openb.json
    python benchmarks/forecast_real.py protocol DIR/helios.csv --freq 1h --horizon 7d
                                               [--first-cut-day 14] [--every 1] [--only ...]
    python benchmarks/forecast_real.py --protocol-table benchmarks/out/forecast_protocol-*.json

`build` writes `DIR/helios.csv`, `DIR/philly.csv`, `DIR/openb.csv` and `DIR/dlrm.csv`
(default benchmarks/out/, gitignored: derived data is never committed). Helios and Philly
times are the files' own (the site's local time, read as UTC).

`eval` runs the real `slurmgpu forecast --demand-file CSV --freq F --horizon 1d
--train-until CUT --format json` (a subprocess; `--freq 1m` by default, `1h` is autopilot's)
at each cut point: one per day (or every `--every` days) from `--first-cut-day` days after
the series' start to its last whole day, every cut's history being everything before it.
The held-out day after a cut is seen by neither the fit nor the pick. It scores the
forecast the command printed (the picked model) on that day, and, for the table, every
candidate model fitted on the same history (the library's `_runs`, what the command refits
after its pick). `--only` keeps some partitions (the tune/report split of
docs/forecast.md).

`protocol` mirrors the acceptance check of issue #22's Done-when ("beats seasonal-naive
sMAPE on every partition it picks it for, and by >= 10% on average"): at each cut point it
runs the command once (`--horizon` 1d or 7d, the default), and for every partition whose
JSON pick is a learned model compares the sMAPE of the forecast the command printed with
seasonal-naive's (`models.seasonal_naive` on the same history) over the whole horizon
after the cut. Per cut: whether every learned pick won (the acceptance's yes/no), how many
partitions got a learned pick, their mean gain; per partition, whether its picked cuts
taken together beat seasonal-naive. `--protocol-table` prints the summary of
saved runs (one line per source, bucket and horizon; `--only`/`--exclude` split a file's
partitions into tune and report sets).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import numpy as np

from slurmgpu.forecast import models
from slurmgpu.forecast.demand import bucket_average
from slurmgpu.forecast.demand_file import demand_file_series
from slurmgpu.forecast.pipeline import (
    _runs,
    parse_duration,
    parse_freq,
    smape_pct,
    under_rate,
)

MIN = 60.0
DAY = 86400.0
DAY_S = 86400
T0 = {"openb": 1672617600.0, "dlrm": 1735516800.0}  # 2023-01-02, 2024-12-30: Mondays, UTC
OPENB_MIN_PODS = 100


def _float(text: str) -> float:
    return float(text) if text.strip() else float("nan")


def _read(path: str) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def openb_intervals(path: str) -> tuple[dict[str, tuple], float, float]:
    """Per qos: (run start, run end, pending start, pending end, gpus); the dense part's
    first whole day and the trace's end (seconds of the trace's clock)."""
    rows = _read(path)
    create = np.array([_float(r["creation_time"]) for r in rows])
    sched = np.array([_float(r["scheduled_time"]) for r in rows])
    delete = np.array([_float(r["deletion_time"]) for r in rows])
    gpus = np.array([_float(r["num_gpu"]) * _float(r["gpu_milli"]) / 1000.0 for r in rows])
    qos = np.array([r["qos"] for r in rows], dtype=object)
    end = float(np.nanmax(delete))
    # the dense part: the first day on which at least 0.5% of the pods were created, then
    # its next midnight (the trace starts inside that day)
    per_day = np.bincount((create // DAY).astype(int))
    start = (int(np.argmax(per_day >= 0.005 * len(rows))) + 1) * DAY
    out = {}
    for q in sorted(set(qos.tolist())):
        m = qos == q
        if m.sum() < OPENB_MIN_PODS:
            continue
        ran = ~np.isnan(sched[m])
        pend_end = np.where(ran, sched[m], delete[m])
        out[q] = (np.where(ran, sched[m], np.inf), delete[m], create[m], pend_end, gpus[m])
    return out, start, end


def dlrm_intervals(path: str, top_apps: int) -> tuple[dict[str, tuple], float, float]:
    """HN (GPU) instances: all of them as `HN`, and the `top_apps` apps with the most
    instances created during the trace (the ones whose demand moves), each its own series."""
    rows = [r for r in _read(path) if _float(r["gpu_request"]) > 0]
    create = np.array([_float(r["creation_time"]) for r in rows])
    sched = np.array([_float(r["scheduled_time"]) for r in rows])
    delete = np.array([_float(r["deletion_time"]) for r in rows])
    gpus = np.array([_float(r["gpu_request"]) for r in rows])
    app = np.array([r["app_name"] for r in rows], dtype=object)
    end = float(np.nanmax(np.concatenate([create, sched, delete])))
    before = np.isnan(create)  # alive when the trace began
    run_start = np.where(before, -1.0, np.where(np.isnan(sched), np.inf, sched))
    run_end = np.where(np.isnan(delete), end + DAY, delete)
    pend_start = np.where(before, 0.0, create)
    pend_end = np.where(before, 0.0, np.where(np.isnan(sched), run_end, sched))
    keys = {"HN": np.ones(len(rows), dtype=bool)}
    born = {a: int((~before & (app == a)).sum()) for a in set(app.tolist())}
    for a in sorted(born, key=lambda a: (-born[a], a))[:top_apps]:
        keys[a] = app == a
    out = {
        k: (run_start[m], run_end[m], pend_start[m], pend_end[m], gpus[m]) for k, m in keys.items()
    }
    return out, 0.0, end


def write_demand(path: str, series: dict[str, tuple], start: float, end: float, t0: float) -> int:
    """Minute averages from `start` to the last whole minute before `end`, as a
    time,partition,gpus CSV (epoch seconds, `t0` + the trace's clock)."""
    edges = np.arange(start, np.floor(end / MIN) * MIN + 0.5, MIN)
    rows = 0
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "partition", "gpus"])
        for name, (rs, re_, ps, pe, g) in series.items():
            y = bucket_average(rs, re_, g, edges) + bucket_average(ps, pe, g, edges)
            for t, v in zip(edges[:-1], y, strict=True):
                w.writerow([int(t0 + t), name, f"{v:.4f}"])
            rows += len(y)
    return rows


def _sequence(path: str, columns: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    """(times, the sum of `columns` per row) of a per-minute sequence file."""
    rows = _read(path)
    times = [r["time"] for r in rows]
    return times, np.array([sum(_float(r[c]) for c in columns) for r in rows])


def write_sequences(path: str, series: dict[str, tuple[list[str], np.ndarray]]) -> int:
    """time,partition,gpus rows from per-minute sequences (`time` as the file has it, UTC)."""
    rows = 0
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "partition", "gpus"])
        for name, (times, values) in series.items():
            for t, v in zip(times, values, strict=True):
                w.writerow([t.replace(" ", "T") + "Z", name, f"{v:g}"])
            rows += len(times)
    return rows


def build(args) -> None:
    if args.helios_dir:
        files = sorted(glob.glob(os.path.join(args.helios_dir, "earth-*-sequence.csv")))
        series = {
            os.path.basename(f)[len("earth-") : -len("-sequence.csv")]: _sequence(
                f, ("running_gpu_num", "pending_gpu_num")
            )
            for f in files
        }
        n = write_sequences(os.path.join(args.out, "helios.csv"), series)
        print(f"helios: {sorted(series)}, {n} rows")
    if args.philly:
        series = {"philly": _sequence(args.philly, ("active",))}
        n = write_sequences(os.path.join(args.out, "philly.csv"), series)
        print(f"philly: {n} rows")
    if args.openb:
        series, start, end = openb_intervals(args.openb)
        n = write_demand(os.path.join(args.out, "openb.csv"), series, start, end, T0["openb"])
        print(f"openb: {sorted(series)}, {n} rows, days {start / DAY:.2f}..{end / DAY:.2f}")
    if args.dlrm:
        series, start, end = dlrm_intervals(args.dlrm, args.top_apps)
        n = write_demand(os.path.join(args.out, "dlrm.csv"), series, start, end, T0["dlrm"])
        print(f"dlrm: {sorted(series)}, {n} rows, days {start / DAY:.2f}..{end / DAY:.2f}")


def _iso(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_forecast(csv_path: str, until_s: float, horizon: str, freq: str) -> dict:
    """The real command's JSON document for the history before `until_s`."""
    cmd = [sys.executable, "-m", "slurmgpu", "forecast", "--demand-file", csv_path,
           "--train-until", _iso(until_s), "--horizon", horizon, "--freq", freq,
           "--format", "json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"forecast failed at {_iso(until_s)}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def evaluate(args) -> list[dict]:
    """One row per (partition, cut): the command's pick and each model's held-out scores."""
    freq_s = parse_freq(args.freq)
    steps = DAY_S // freq_s
    whole = demand_file_series(args.csv, freq_s).series
    only = set(args.only.split(",")) if args.only else None
    t_s = ((whole.times - np.datetime64(0, "s")) / np.timedelta64(1, "s")).astype(float)
    first = t_s[0]
    n_days = int((t_s[-1] + freq_s - first) // DAY)
    cuts = [first + d * DAY for d in range(args.first_cut_day, n_days, args.every)]
    if args.cuts:
        cuts = cuts[: args.cuts]
    label = args.label or os.path.splitext(os.path.basename(args.csv))[0]
    table = []
    for cut in cuts:
        doc = run_forecast(args.csv, cut, "1d", args.freq)
        i = round((cut - first) / freq_s)
        for entry in doc["by_partition"]:
            part = entry["partition"]
            if only is not None and part not in only:
                continue
            y = whole.demand(part)
            actual = y[i : i + steps]
            got = np.array([p["gpus"] for p in entry["points"]])
            hist = slice(0, i)
            preds = _runs(models.CANDIDATES, y[hist], whole.pending[part][hist], t_s[hist],
                          freq_s, steps)  # fmt: skip
            test = {m: smape_pct(actual, p) for m, p in preds.items() if not isinstance(p, str)}
            under = {m: under_rate(actual, p) for m, p in preds.items() if not isinstance(p, str)}
            picked = entry["model"]
            back = doc["backtest"]["by_partition"]
            back_smape = next(b for b in back if b["partition"] == part)["models"]
            row = {
                "source": label, "freq": args.freq, "partition": part, "cut": _iso(cut),
                "picked": picked,
                "picked_smape": smape_pct(actual, got), "picked_under": under_rate(actual, got),
                "test_smape": test, "test_under": under,
                "backtest_smape": {m: v["smape_pct"] for m, v in back_smape.items()},
                "mean_gpus": float(actual.mean()),
            }  # fmt: skip
            table.append(row)
            cells = "  ".join(f"{test.get(m, float('nan')):6.2f}" for m in models.CANDIDATES)
            print(f"{label:<6} {part:<10} {row['cut'][:10]}  {cells}  picked {picked} "
                  f"{row['picked_smape']:6.2f}", flush=True)  # fmt: skip
    return table


def gain(row: dict, model: str | None = None) -> float:
    """1 - sMAPE(model) / sMAPE(seasonal-naive) on the held-out day; where seasonal-naive
    was exact, 0 for an exact model and -1 otherwise (as the pick's fold gains)."""
    naive = row["test_smape"][models.NAIVE]
    got = row["picked_smape"] if model is None else row["test_smape"][model]
    if naive == 0:
        return 0.0 if got == 0 else -1.0
    return 1.0 - got / naive


def _names(table: list[dict]) -> list[str]:
    """The models the rows were scored with, in the candidates' order (an older run's may
    lack some)."""
    seen = {m for r in table for m in r["test_smape"]}
    return [m for m in models.CANDIDATES if m in seen] + sorted(seen - set(models.CANDIDATES))


def partition_gains(table: list[dict]) -> dict[tuple, float]:
    """Per series (source, freq, partition) with a learned pick on some days: 1 - its mean
    held-out sMAPE on those days / seasonal-naive's on the same days."""
    days: dict[tuple, list[dict]] = {}
    for r in table:
        if r["picked"] != models.NAIVE:
            days.setdefault((r["source"], r.get("freq", "1m"), r["partition"]), []).append(r)
    out = {}
    for key, rows in days.items():
        naive = np.mean([r["test_smape"][models.NAIVE] for r in rows])
        got = np.mean([r["picked_smape"] for r in rows])
        out[key] = 0.0 if naive == 0 else 1.0 - got / naive
    return out


def summarize(table: list[dict]) -> str:
    lines = []
    names = _names(table)
    naive = np.mean([r["test_smape"][models.NAIVE] for r in table])
    for m in names[1:]:
        rows = [r for r in table if m in r["test_smape"]]
        better = np.mean([r["test_smape"][m] < r["test_smape"][models.NAIVE] for r in rows])
        lines.append(f"{m}: held-out sMAPE mean {np.mean([r['test_smape'][m] for r in rows]):.1f}% "
                     f"(seasonal-naive {naive:.1f}%), better than seasonal-naive on "
                     f"{100 * better:.0f}% of {len(rows)} series-days")  # fmt: skip
    won = [r for r in table if r["picked"] != models.NAIVE]
    gains = [gain(r) for r in won]
    worse = sum(g < 0 for g in gains)
    lines.append(
        f"picked a learned model on {len(won)}/{len(table)} series-days; held-out gain there "
        f"mean {100 * np.mean(gains) if gains else 0:.1f}%, worse than naive on {worse}"
        + (f" (worst {100 * min(gains):+.1f}%)" if gains else "")
    )
    parts = partition_gains(table)
    lines.append(
        f"per partition (its picked days together): picked on {len(parts)} of "
        f"{len({(r['source'], r.get('freq', '1m'), r['partition']) for r in table})}, gain mean "
        f"{100 * np.mean(list(parts.values())) if parts else 0:.1f}%, worse than naive on "
        f"{sum(g < 0 for g in parts.values())}"
        + (f" (worst {100 * min(parts.values()):+.1f}%)" if parts else "")
    )
    under = {m: np.mean([r["test_under"][m] for r in table if m in r["test_under"]]) for m in names}
    lines.append("held-out under-forecast rate: " + ", ".join(
        f"{m} {v:.2f}" for m, v in under.items()) + f", picked "
        f"{np.mean([r['picked_under'] for r in table]):.2f}")  # fmt: skip
    return "\n".join(lines)


def markdown(table: list[dict]) -> str:
    """Per series (source, partition): held-out sMAPE per model (mean over the cuts), the
    picks, and the picked model's gain over seasonal-naive (mean where picked, worst)."""
    names = _names(table)
    short = {models.NAIVE: "naive", models.BOOSTED: "trees"}
    head = ("| series | days | mean GPUs | " + " | ".join(short.get(m, m) for m in names)
            + " | picked learned | picked sMAPE | gain on picked days: mean (worst day) "
            "| together |")  # fmt: skip
    lines = [head, "|---|---:|---:|" + "---:|" * len(names) + "---|---:|---:|---:|"]
    together = partition_gains(table)
    keys = dict.fromkeys((r["source"], r.get("freq", "1m"), r["partition"]) for r in table)
    for src, freq, part in keys:
        rows = [
            r
            for r in table
            if (r["source"], r.get("freq", "1m"), r["partition"]) == (src, freq, part)
        ]
        means = [np.mean([r["test_smape"].get(m, np.nan) for r in rows]) for m in names]
        won = [r for r in rows if r["picked"] != models.NAIVE]
        kinds = sorted({short.get(r["picked"], r["picked"]) for r in won})
        g = [gain(r) for r in won]
        gtxt = f"{100 * np.mean(g):+.0f}% ({100 * min(g):+.0f}%)" if g else "-"
        picked = np.mean([r["picked_smape"] for r in rows])
        level = np.mean([r["mean_gpus"] for r in rows])
        lines.append(
            f"| {src} {part} {freq} | {len(rows)} | {level:.1f} | "
            + " | ".join(f"{v:.2f}%" for v in means)
            + f" | {len(won)} of {len(rows)}{' (' + ', '.join(kinds) + ')' if kinds else ''}"
            f" | {picked:.2f}% | {gtxt} | "
            + (
                f"{100 * together[(src, freq, part)]:+.0f}% |"
                if (src, freq, part) in together
                else "- |"
            )
        )
    return "\n".join(lines) + "\n"


def protocol_run(args) -> list[dict]:
    """One row per (cut, partition): the command's pick at that cut (`--horizon`), the
    held-out sMAPE of its printed forecast and of seasonal-naive over the horizon after the
    cut."""
    freq_s = parse_freq(args.freq)
    day = DAY_S // freq_s
    steps = -(-parse_duration(args.horizon, "--horizon") // freq_s)
    whole = demand_file_series(args.csv, freq_s).series
    only = set(args.only.split(",")) if args.only else None
    exclude = set(args.exclude.split(",")) if args.exclude else set()
    t_s = ((whole.times - np.datetime64(0, "s")) / np.timedelta64(1, "s")).astype(float)
    first = t_s[0]
    n = len(t_s)
    first_day = args.first_cut_day or (21 if steps <= day else 14)
    cuts = [
        first + d * DAY for d in range(first_day, n // day + 1, args.every) if d * day + steps <= n
    ]
    if args.cuts:
        cuts = cuts[: args.cuts]
    label = args.label or os.path.splitext(os.path.basename(args.csv))[0]
    rows = []
    for cut in cuts:
        doc = run_forecast(args.csv, cut, args.horizon, args.freq)
        i = round((cut - first) / freq_s)
        for entry in doc["by_partition"]:
            part = entry["partition"]
            if (only is not None and part not in only) or part in exclude:
                continue
            y = whole.demand(part)
            actual = y[i : i + steps]
            got = np.array([p["gpus"] for p in entry["points"]])
            naive = models.seasonal_naive(y[:i], steps, day, 7 * day)
            rows.append({
                "source": label, "freq": args.freq, "horizon": args.horizon,
                "cut": _iso(cut), "partition": part, "picked": entry["model"],
                "picked_smape": smape_pct(actual, got),
                "naive_smape": smape_pct(actual, naive),
                "mean_gpus": float(actual.mean()),
            })  # fmt: skip
        picked = [r for r in rows if r["cut"] == _iso(cut) and r["picked"] != models.NAIVE]
        lost = [r["partition"] for r in picked if not won(r)]
        print(f"{label} {args.freq} {args.horizon} {_iso(cut)[:10]}: learned picked on "
              f"{len(picked)}, lost on {len(lost)} {lost or ''}", flush=True)  # fmt: skip
    return rows


def won(row: dict) -> bool:
    """The learned pick beat seasonal-naive on the held-out horizon (strictly: a tie is not
    a win)."""
    return row["picked_smape"] < row["naive_smape"]


def protocol_gain(row: dict) -> float:
    """1 - sMAPE(pick) / sMAPE(seasonal-naive) over the horizon; where seasonal-naive was
    exact, 0 for an exact pick and -1 otherwise."""
    if row["naive_smape"] == 0:
        return 0.0 if row["picked_smape"] == 0 else -1.0
    return 1.0 - row["picked_smape"] / row["naive_smape"]


def protocol_summary(rows: list[dict]) -> dict:
    """Per cut: did every learned pick win; over the cuts: how many cuts that held, the
    partitions with a learned pick (of all partition-cuts), their mean gain, the losses."""
    cuts: dict[str, list[dict]] = {}
    for r in rows:
        cuts.setdefault(r["cut"], []).append(r)
    picks = [r for r in rows if r["picked"] != models.NAIVE]
    gains = [protocol_gain(r) for r in picks]
    return {
        **partitions_worse(picks),
        "cuts": len(cuts),
        "cuts_all_won": sum(all(won(r) for r in c if r["picked"] != models.NAIVE)
                            for c in cuts.values()),
        "cuts_with_a_pick": sum(any(r["picked"] != models.NAIVE for r in c)
                                for c in cuts.values()),
        "partition_cuts": len(rows),
        "picked": len(picks),
        "mean_gain": float(np.mean(gains)) if gains else None,
        "lost": sum(not won(r) for r in picks),
        "worst": float(min(gains)) if gains else None,
    }  # fmt: skip


def partitions_worse(picks: list[dict]) -> dict:
    """Per partition, its learned picks together: the mean sMAPE of the printed forecasts over
    the cuts it got one against seasonal-naive's over the same cuts. "worse": not below it
    (the Done-when read as a partition's whole held-out record rather than cut by cut)."""
    by: dict[str, list[dict]] = {}
    for r in picks:
        by.setdefault(r["partition"], []).append(r)
    worse = sorted(
        part
        for part, rs in by.items()
        if np.mean([r["picked_smape"] for r in rs]) >= np.mean([r["naive_smape"] for r in rs])
    )
    return {"partitions_picked": len(by), "partitions_worse": worse}


def _worse(got: dict) -> str:
    names = got["partitions_worse"]
    return f"{len(names)} ({', '.join(names)})" if names else "0"


def protocol_table(rows: list[dict], label: str | None = None) -> str:
    """One markdown line per (source, bucket, horizon)."""
    keys = dict.fromkeys((r["source"], r["freq"], r["horizon"]) for r in rows)
    lines = [
        "| source | freq | horizon | cuts | cuts where every pick won | cuts with a pick "
        "| partition-cuts picked | mean gain there | picks lost (worst) "
        "| partitions picked | worse over their picked cuts |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for src, freq, horizon in keys:
        got = protocol_summary(
            [r for r in rows if (r["source"], r["freq"], r["horizon"]) == (src, freq, horizon)]
        )
        gain = "-" if got["mean_gain"] is None else f"{100 * got['mean_gain']:+.0f}%"
        worst = "" if got["worst"] is None else f" ({100 * got['worst']:+.0f}%)"
        lines.append(
            f"| {label or src} | {freq} | {horizon} | {got['cuts']} | {got['cuts_all_won']} | "
            f"{got['cuts_with_a_pick']} | {got['picked']} of {got['partition_cuts']} | {gain} | "
            f"{got['lost']}{worst} | {got['partitions_picked']} | {_worse(got)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", metavar="JSON", help="print a saved run's markdown table")
    sub = ap.add_subparsers(dest="cmd")
    b = sub.add_parser("build", help="demand CSVs from the trace files")
    b.add_argument("--helios-dir", help="HeliosArtifact Earth_vcs sequences: earth-VC-sequence.csv")
    b.add_argument("--philly", help="HeliosArtifact philly_node_sequence.csv")
    b.add_argument("--openb", help="cluster-trace-gpu-v2023 openb_pod_list_default.csv")
    b.add_argument("--dlrm", help="cluster-trace-gpu-v2025 disaggregated_DLRM_trace.csv")
    b.add_argument("--top-apps", type=int, default=8)
    b.add_argument("--out", default="benchmarks/out")
    e = sub.add_parser("eval", help="the forecast at each cut point, scored on the day after")
    e.add_argument("csv")
    e.add_argument("--first-cut-day", type=int, default=21)
    e.add_argument("--cuts", type=int, help="only the first N cut points")
    e.add_argument("--every", type=int, default=1, help="a cut point every N days (default 1)")
    e.add_argument("--freq", default="1m", help="the forecast's bucket (1m, 1h)")
    e.add_argument("--only", help="comma-separated partitions (default: all)")
    e.add_argument("--label")
    e.add_argument("--json", help="where to write the rows (default benchmarks/out/...)")
    p = sub.add_parser("protocol", help="the acceptance check: one pick per cut, every pick won?")
    p.add_argument("csv")
    p.add_argument("--freq", default="1h", help="the forecast's bucket (1h, the default; 1m)")
    p.add_argument("--horizon", default="7d", help="1d or 7d (the command's default)")
    p.add_argument("--first-cut-day", type=int,
                   help="days of history before the first cut (default 21 for a 1-day horizon, "
                   "14 for longer: two weeks, and 7 days left after it in a month)")  # fmt: skip
    p.add_argument("--every", type=int, default=1, help="a cut point every N days (default 1)")
    p.add_argument("--cuts", type=int, help="only the first N cut points")
    p.add_argument("--only", help="comma-separated partitions (default: all)")
    p.add_argument("--exclude", help="comma-separated partitions to leave out")
    p.add_argument("--label")
    p.add_argument("--json", help="where to write the rows (default benchmarks/out/...)")
    ap.add_argument("--protocol-table", nargs="+", metavar="JSON",
                    help="print saved protocol runs' summary")  # fmt: skip
    args = ap.parse_args()
    if args.protocol_table:
        rows = []
        for path in args.protocol_table:
            with open(path) as fh:
                rows += json.load(fh)
        print(protocol_table(rows), end="")
        return
    if args.table:
        with open(args.table) as fh:
            table = json.load(fh)
        print(markdown(table), end="")
        print(summarize(table))
        return
    if args.cmd == "build":
        build(args)
    elif args.cmd == "eval":
        table = evaluate(args)
        print(summarize(table))
        label = args.label or os.path.splitext(os.path.basename(args.csv))[0]
        out = args.json or f"benchmarks/out/forecast_real-{label}-{args.freq}.json"
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w") as fh:
            json.dump(table, fh, indent=1)
    elif args.cmd == "protocol":
        rows = protocol_run(args)
        print(protocol_table(rows), end="")
        label = args.label or os.path.splitext(os.path.basename(args.csv))[0]
        out = args.json or (
            f"benchmarks/out/forecast_protocol-{label}-{args.freq}-{args.horizon}.json"
        )
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w") as fh:
            json.dump(rows, fh, indent=1)
    else:
        ap.print_help()


if __name__ == "__main__":
    main()
