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
from dataclasses import dataclass, replace

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


def classify(name: str, gtype: str | None) -> tuple[str, str]:
    """(vendor, accelerator class) of a GRES `name:type` (`gpu:mi300x_cpx`, `npu:910b`,
    `gpu:1g.10gb`) by the rules of the offers; ("", "") for what the catalogue cannot place
    (an untyped GPU is class `gpu` of an unknown vendor)."""
    if name == "shard":
        return "", CLASS_SLICE
    if name == "gpu" and gtype and mig_profile_for_type(gtype) is not None:
        return "nvidia", CLASS_SLICE
    part = _PARTITIONED.match(gtype or "")
    base = model_for_type(part.group("base") if part else gtype) if gtype else None
    if name == "npu":
        return (_vendor_of(base) if base else "ascend"), CLASS_NPU
    if base is None:
        return "", (CLASS_GPU if name == "gpu" else "")
    if part:
        return _vendor_of(base), CLASS_SLICE
    return _vendor_of(base), (CLASS_LINKED if base.fabric else CLASS_GPU)


def _vendor_of(model) -> str:
    return getattr(model, "vendor", "nvidia") or "nvidia"


@dataclass(frozen=True)
class Offer:
    """One kind of device the nodes offer, independent of any request's memory.

    `sizing` says how a request takes it: `one` (a single device of `unit_memory_mib`: an
    NPU, a MIG slice, an AMD partition), `whole` (1 to `max_count` whole GPUs of a type) or
    `shard` (1 to `max_count` shards of one GPU). The same table is rendered into
    job_submit.lua, whose Lua routing applies `Offer.device` and the sort of `devices` to it,
    so the wrapper and the controller pick the same device.
    """

    name: str  # gpu, npu, shard
    gtype: str | None
    accel_class: str
    vendor: str
    unit_memory_mib: float
    max_count: int
    isolation: str  # npu, mig, partition, gpu, shard
    sizing: str  # one, whole, shard

    def device(self, memory_mib: float) -> Device | None:
        """The device this offer gives a request of `memory_mib`, or None when it cannot."""
        if self.sizing == "one":
            if self.unit_memory_mib < memory_mib:
                return None
            need = 1
        else:
            need = max(1, math.ceil(memory_mib / self.unit_memory_mib))
            if need > self.max_count:
                return None
        gres = f"shard:{need}" if self.sizing == "shard" else f"{self.name}:{self.gtype}:{need}"
        mem = self.unit_memory_mib if self.sizing == "one" else need * self.unit_memory_mib
        return Device(gres, self.accel_class, self.vendor, mem, need, self.isolation)


def _node_offers(node: NodeGres, shards_per_gpu: int | None) -> list[Offer]:
    """The offers of one node (node GRES order; shards last)."""
    out: list[Offer] = []
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
            mem = float(mig[1].memory_mib)
            out.append(Offer(name, gtype, CLASS_SLICE, "nvidia", mem, 1, "mig", "one"))
            continue
        part = _PARTITIONED.match(gtype)
        base = model_for_type(part.group("base") if part else gtype)
        if base is None:
            continue
        vendor = _vendor_of(base)
        if part:  # an AMD logical GPU: 1/N of the package's memory, one device
            mem = base.memory_mib / COMPUTE_PARTITIONS[part.group("mode").upper()]
            out.append(Offer(name, gtype, CLASS_SLICE, vendor, mem, 1, "partition", "one"))
        elif name == "npu":
            # one NPU per job here: HCCS multi-NPU jobs ask for npu:N themselves
            mem = float(base.memory_mib)
            out.append(Offer(name, gtype, CLASS_NPU, vendor, mem, 1, "npu", "one"))
        else:
            whole_types.append((gtype, count))
            cls = CLASS_LINKED if base.fabric else CLASS_GPU
            mem = float(base.memory_mib)
            out.append(Offer(name, gtype, cls, vendor, mem, count, "gpu", "whole"))
    if shards and whole_types:
        models = {model_for_type(t) for t, _ in whole_types}
        per_gpu = shards_per_gpu or shards // sum(c for _, c in whole_types)
        if per_gpu and len(models) == 1:
            model = models.pop()
            per_shard = model.memory_mib / per_gpu
            vendor = _vendor_of(model)
            out.append(
                Offer("shard", None, CLASS_SLICE, vendor, per_shard, per_gpu, "shard", "shard")
            )
    return out


def offers(nodes: Iterable[NodeGres], shards_per_gpu: int | None = None) -> tuple[Offer, ...]:
    """Every offer of the nodes, in node order, without repeats: whole GPUs of one type merge
    into the largest count on one node (a request needs them on one node)."""
    found: list[Offer] = []
    whole_at: dict[str | None, int] = {}
    for node in nodes:
        for offer in _node_offers(node, shards_per_gpu):
            if offer.sizing == "whole" and offer.gtype in whole_at:
                i = whole_at[offer.gtype]
                if offer.max_count > found[i].max_count:
                    found[i] = replace(found[i], max_count=offer.max_count)
            elif offer not in found:
                if offer.sizing == "whole":
                    whole_at[offer.gtype] = len(found)
                found.append(offer)
    return tuple(found)


def device_order(d: Device) -> tuple:
    """Smallest memory first; ties: fewer devices, then isolation, then the --gres text."""
    return (d.memory_mib, d.count, _ISOLATION[d.isolation], d.gres)


def devices(nodes: Iterable[NodeGres], memory_mib: float, shards_per_gpu: int | None = None):
    """Every device kind the nodes offer that holds `memory_mib` (one entry per --gres)."""
    return devices_of(offers(nodes, shards_per_gpu), memory_mib)


def devices_of(table: Iterable[Offer], memory_mib: float) -> list[Device]:
    """`devices` from an offer table: the first offer giving a --gres wins it."""
    found: dict[str, Device] = {}
    for offer in table:
        d = offer.device(memory_mib)
        if d is not None:
            found.setdefault(d.gres, d)
    return sorted(found.values(), key=device_order)


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
    return route_offers(offers(nodes, shards_per_gpu), req)


def route_offers(table: Iterable[Offer], req: AccelRequest) -> Device:
    """`route` over an offer table (what job_submit.lua holds)."""
    table = tuple(table)
    fitting = [d for d in devices_of(table, req.memory_mib) if _allowed(d, req)]
    if fitting:
        return fitting[0]
    offered = [d for d in devices_of(table, 0) if _allowed(d, req)]
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
