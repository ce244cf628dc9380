"""Routing across vendors: which device a vendor-neutral request fits best (pure).

A request is `mem>=40G[,vendor=amd][,class=npu|gpu-slice]` (`submit --accel`), or a job
kind's accelerator classes from the policy (`accel = ["npu", "gpu-slice"]`). Every device
the cluster's nodes offer (the GRES `sinfo -N -o %G` prints) is one candidate with a class:

| class | devices |
|---|---|
| `npu` | Ascend NPUs (`npu:910b:1`) |
| `gpu-slice` | MIG instances (`gpu:3g.40gb:1`), shards, AMD MI300 partitions (`gpu:mi300x_cpx:1`) |
| `gpu` | whole GPUs of any vendor, as many as the memory needs (`gpu:h100:2`) |
| `linked-gpu` | whole GPUs of a model sold on linked baseboards (NVLink SXM, XGMI OAM) |

The pick is the smallest memory that fits among the allowed classes and vendors (ties: a
single device before several, then isolation: npu, MIG, partition, whole GPU, shard).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from slurmgpu.errors import UsageError
from slurmgpu.model.catalog import model_for_type
from slurmgpu.model.gpu import COMPUTE_PARTITIONS, VENDORS
from slurmgpu.model.policy import mig_profile_for_type
from slurmgpu.model.slicing import NodeGres
from slurmgpu.util.units import parse_size_mib

CLASS_NPU = "npu"
CLASS_SLICE = "gpu-slice"
CLASS_GPU = "gpu"
CLASS_LINKED = "linked-gpu"
CLASSES = (CLASS_NPU, CLASS_SLICE, CLASS_GPU, CLASS_LINKED)
_ISOLATION = {"npu": 0, "mig": 1, "partition": 2, "gpu": 3, "shard": 4}
_PARTITIONED = re.compile(r"^(?P<base>.+)_(?P<mode>dpx|tpx|qpx|cpx)$")


@dataclass(frozen=True)
class AccelRequest:
    """What a job needs: memory per job, and which vendors and classes may serve it."""

    memory_mib: float
    vendors: tuple[str, ...] = ()  # empty: any
    classes: tuple[str, ...] = ()  # empty: any


@dataclass(frozen=True)
class Device:
    """One kind of device on offer: its --gres request, class, vendor and memory."""

    gres: str
    accel_class: str
    vendor: str
    memory_mib: float
    count: int  # devices the request takes
    isolation: str  # npu, mig, partition, gpu, shard

    def describe(self) -> str:
        what = {
            "npu": "Ascend NPU",
            "mig": "MIG slice",
            "partition": "AMD partition",
            "gpu": "whole GPU",
            "shard": "GPU shard",
        }[self.isolation]
        n = f"{self.count} x " if self.count > 1 else ""
        return f"{n}{what} ({self.gres}, {self.memory_mib / 1024:.0f} GiB, {self.vendor})"


def parse_request(text: str, default_classes: tuple[str, ...] = ()) -> AccelRequest:
    """`mem>=40G[,vendor=amd|nvidia][,class=npu|gpu-slice]` -> AccelRequest."""
    memory = None
    vendors: tuple[str, ...] = ()
    classes = default_classes
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = re.fullmatch(r"mem\s*>=\s*(\S+)", part)
        if m:
            try:
                memory = parse_size_mib(m.group(1), default_unit="G")
            except ValueError as exc:
                raise UsageError(f"--accel {part}: {exc}") from None
            continue
        key, eq, value = part.partition("=")
        options = tuple(v.strip().lower() for v in value.split("|") if v.strip())
        if eq and key.strip() == "vendor" and options and set(options) <= set(VENDORS):
            vendors = options
        elif eq and key.strip() == "class" and options and set(options) <= set(CLASSES):
            classes = options
        else:
            raise UsageError(
                f"--accel {part!r}: use mem>=SIZE, vendor={'|'.join(VENDORS)}, "
                f"class={'|'.join(CLASSES)}"
            )
    if memory is None:
        raise UsageError("--accel: give the memory the job needs, e.g. mem>=40G")
    return AccelRequest(memory_mib=float(memory), vendors=vendors, classes=classes)


def _vendor_of(model) -> str:
    return getattr(model, "vendor", "nvidia") or "nvidia"


def devices(nodes: Iterable[NodeGres], memory_mib: float, shards_per_gpu: int | None = None):
    """Every device kind the nodes offer that holds `memory_mib` (one entry per --gres)."""
    found: dict[str, Device] = {}

    def add(d: Device) -> None:
        found.setdefault(d.gres, d)

    for node in nodes:
        whole_types: list[tuple[str, int]] = []
        shards = 0
        for name, gtype, count in node.items:
            if name == "shard":
                shards += count
                continue
            if name not in ("gpu", "npu") or not gtype:
                continue
            mig = mig_profile_for_type(gtype) if name == "gpu" else None
            if mig is not None:
                model, profile = mig
                if profile.memory_mib >= memory_mib:
                    add(
                        Device(
                            f"gpu:{gtype}:1", CLASS_SLICE, "nvidia", profile.memory_mib, 1, "mig"
                        )
                    )
                continue
            part = _PARTITIONED.match(gtype)
            base = model_for_type(part.group("base") if part else gtype)
            if base is None:
                continue
            vendor = _vendor_of(base)
            if part:  # an AMD logical GPU: 1/N of the package's memory, one device
                mem = base.memory_mib / COMPUTE_PARTITIONS[part.group("mode").upper()]
                if mem >= memory_mib:
                    add(Device(f"gpu:{gtype}:1", CLASS_SLICE, vendor, mem, 1, "partition"))
                continue
            need = max(1, math.ceil(memory_mib / base.memory_mib))
            if need > count:
                continue
            if name == "npu":
                # one NPU per job here: HCCS multi-NPU jobs ask for npu:N themselves
                if need == 1:
                    add(Device(f"npu:{gtype}:1", CLASS_NPU, vendor, base.memory_mib, 1, "npu"))
                continue
            whole_types.append((gtype, count))
            cls = CLASS_LINKED if base.fabric else CLASS_GPU
            add(Device(f"gpu:{gtype}:{need}", cls, vendor, need * base.memory_mib, need, "gpu"))
        if shards and whole_types:
            models = {model_for_type(t) for t, _ in whole_types}
            per_gpu = shards_per_gpu or shards // sum(c for _, c in whole_types)
            if per_gpu and len(models) == 1:
                model = models.pop()
                per_shard = model.memory_mib / per_gpu
                need = max(1, math.ceil(memory_mib / per_shard))
                if need <= per_gpu:
                    add(
                        Device(
                            f"shard:{need}",
                            CLASS_SLICE,
                            _vendor_of(model),
                            need * per_shard,
                            need,
                            "shard",
                        )
                    )
    return sorted(
        found.values(), key=lambda d: (d.memory_mib, d.count, _ISOLATION[d.isolation], d.gres)
    )


def _allowed(d: Device, req: AccelRequest) -> bool:
    if req.vendors and d.vendor not in req.vendors:
        return False
    if not req.classes:
        return True
    # a linked whole GPU also serves a plain `gpu` ask
    return d.accel_class in req.classes or (
        d.accel_class == CLASS_LINKED and CLASS_GPU in req.classes
    )


def route(
    nodes: Iterable[NodeGres], req: AccelRequest, shards_per_gpu: int | None = None
) -> Device:
    """The smallest fitting allowed device; UsageError naming what the cluster has."""
    nodes = list(nodes)
    fitting = [d for d in devices(nodes, req.memory_mib, shards_per_gpu) if _allowed(d, req)]
    if fitting:
        return fitting[0]
    offered = [d for d in devices(nodes, 0, shards_per_gpu) if _allowed(d, req)]
    limits = []
    if req.vendors:
        limits.append("vendor " + "|".join(req.vendors))
    if req.classes:
        limits.append("class " + "|".join(req.classes))
    scope = f" ({', '.join(limits)})" if limits else ""
    if not offered:
        raise UsageError(f"no device on this cluster matches the request{scope}")
    biggest = max(offered, key=lambda d: d.memory_mib)
    raise UsageError(
        f"no device{scope} holds {req.memory_mib / 1024:.0f} GiB: the largest single "
        f"device is {biggest.describe()}"
    )
