"""Build `JS1:` values the way jobstats' code writes them (`report_job_json(encode=True)`).

jobstats: `json.dumps({'nodes': sp_node, 'total_time': diff, 'gpus': gpus},
separators=(',', ':'))`, then `base64.b64encode(gzip.compress(data.encode('ascii')))`;
GPU maps are keyed by the exporter's `minor_number` label (a string); values with a decimal
point are rounded to one place, whole numbers stay ints (`get_data_out`).
"""

from __future__ import annotations

import base64
import gzip
import json


def jobstats_value(nodes: dict, total_time: int, gpus: int) -> str:
    data = json.dumps(
        {"nodes": nodes, "total_time": total_time, "gpus": gpus}, separators=(",", ":")
    )
    return "JS1:" + base64.b64encode(gzip.compress(data.encode("ascii"))).decode("ascii")


def gpu_node(utils: dict[str, float], used: dict[str, int], total: dict[str, int]) -> dict:
    return {
        "cpus": 8,
        "total_time": 3500.2,
        "used_memory": 12884901888,
        "total_memory": 68719476736,
        "gpu_utilization": utils,
        "gpu_used_memory": used,
        "gpu_total_memory": total,
    }
