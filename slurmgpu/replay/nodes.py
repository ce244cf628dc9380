"""Whole-GPU placement and what backfill reads from the nodes (compiled, `_jit.njit`).

Why this shape: a start or an end changes one node (or a few, for a multi-node job), while
backfill asks many times per pass "can a job of g GPUs start on some node now" and "when do
particular nodes hold it". So each partition keeps its nodes counted by free GPUs
(`Parts.bucket`, `Parts.idle_full`: O(GPUs per node) for "can start"), the running jobs'
expected ends sorted (`end_*`, the profile's input), and per node and GPU count the soonest
time that node holds the count, recomputed only for nodes whose version (`Nodes.ver`, bumped
by `touch`) moved since; the full-size nodes' idle times stay sorted, re-sorting only the
nodes touched since the last call.
"""

from __future__ import annotations

import math

from slurmgpu.replay._jit import inline, njit

INF = math.inf


@inline
def touch(nodes, parts, node):
    """A node's jobs, free GPUs or their expected ends changed: what was worked out from it
    is stale."""
    nodes.ver[node] += 1
    p = nodes.part[node]
    parts.ver[p] += 1
    if nodes.cap[node] == parts.max_cap[p] and not nodes.idle_stale[node]:
        nodes.idle_stale[node] = True
        parts.stale[parts.idle_lo[p] + parts.stale_n[p]] = node
        parts.stale_n[p] += 1


@njit
def set_free(nodes, parts, node, value):
    touch(nodes, parts, node)
    p = nodes.part[node]
    old = nodes.free[node]
    parts.bucket[p, old] -= 1
    parts.bucket[p, value] += 1
    per = parts.max_cap[p]
    if nodes.cap[node] == per:
        if old == per:
            parts.idle_full[p] -= 1
        if value == per:
            parts.idle_full[p] += 1
    parts.free_whole[p] += value - old
    nodes.free[node] = value


@inline
def can_place(parts, p, gpus):
    """Whether `place` would find nodes now, without choosing them."""
    if gpus > parts.free_whole[p]:
        return False
    per = parts.max_cap[p]
    if gpus <= per:
        return parts.bucket[p, max(gpus, 0) : per + 1].sum() > 0
    return parts.idle_full[p] >= -(-gpus // per)


@njit
def place(nodes, parts, p, gpus, out):
    """Best fit: the node with the fewest free GPUs that still holds the job (the lowest
    numbered of them); a job larger than a node takes the lowest numbered whole idle nodes.
    Writes the nodes into `out`; their count (0: none)."""
    if not can_place(parts, p, gpus):
        return 0
    per = parts.max_cap[p]
    lo, hi = parts.node_lo[p], parts.node_hi[p]
    if gpus <= per:
        for free in range(max(gpus, 0), per + 1):
            if parts.bucket[p, free] > 0:
                for node in range(lo, hi):
                    if nodes.free[node] == free:
                        out[0] = node
                        return 1
        return 0
    need = -(-gpus // per)
    got = 0
    for node in range(lo, hi):
        if got == need:
            break
        if nodes.cap[node] == per and nodes.free[node] == per:
            out[got] = node
            got += 1
    return got


@inline
def node_gpus(gpus, per, k, count):
    """The GPUs of the k-th of a job's `count` nodes (whole nodes, the rest on the last)."""
    if count == 1:
        return gpus
    return per if k < count - 1 else gpus - per * (count - 1)


@njit
def take(jobs, nodes, parts, job, count):
    """Job `job` takes the first `count` nodes of its allocation slice."""
    p = jobs.part[job]
    g = int(jobs.gpus[job])
    per = parts.max_cap[p]
    base = jobs.noff[job]
    for k in range(count):
        node = jobs.anodes[base + k]
        c = node_gpus(g, per, k, count)
        set_free(nodes, parts, node, nodes.free[node] - c)
        s = 0
        while nodes.slot_job[node, s] >= 0:
            s += 1
        nodes.slot_job[node, s] = job
        nodes.slot_gpus[node, s] = c


@njit
def give(jobs, nodes, parts, job):
    """Job `job` leaves the nodes of its allocation."""
    base = jobs.noff[job]
    count = jobs.noff[job + 1] - base
    for k in range(count):
        node = jobs.anodes[base + k]
        for s in range(nodes.slot_job.shape[1]):
            if nodes.slot_job[node, s] == job:
                set_free(nodes, parts, node, nodes.free[node] + nodes.slot_gpus[node, s])
                nodes.slot_job[node, s] = -1
                nodes.slot_gpus[node, s] = 0
                break


# --- running jobs and their expected ends ------------------------------------------------
@inline
def add_running(jobs, parts, p, job):
    k = parts.run_lo[p] + parts.run_n[p]
    if k >= parts.run_lo[p + 1]:
        raise RuntimeError("replay: more running jobs than a partition can hold")
    parts.run_jobs[k] = job
    jobs.rpos[job] = k
    parts.run_n[p] += 1


@inline
def drop_running(jobs, parts, p, job):
    k = jobs.rpos[job]
    last = parts.run_lo[p] + parts.run_n[p] - 1
    moved = parts.run_jobs[last]
    parts.run_jobs[k] = moved
    jobs.rpos[moved] = k
    jobs.rpos[job] = -1
    parts.run_n[p] -= 1


@inline
def _end_index(parts, p, end, job):
    """Where (end, job) goes among the partition's sorted expected ends (bisect_left)."""
    lo = parts.end_lo[p]
    hi = lo + parts.end_n[p]
    while lo < hi:
        mid = (lo + hi) >> 1
        e = parts.end_t[mid]
        if e < end or (e == end and parts.end_j[mid] < job):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit
def add_end(parts, p, end, job, gpus):
    k = _end_index(parts, p, end, job)
    last = parts.end_lo[p] + parts.end_n[p]
    if last >= parts.end_lo[p + 1]:
        raise RuntimeError("replay: more expected ends than a partition can hold")
    for j in range(last, k, -1):
        parts.end_t[j] = parts.end_t[j - 1]
        parts.end_j[j] = parts.end_j[j - 1]
        parts.end_g[j] = parts.end_g[j - 1]
    parts.end_t[k] = end
    parts.end_j[k] = job
    parts.end_g[k] = gpus
    parts.end_n[p] += 1


@njit
def drop_end(parts, p, end, job):
    """Remove (end, job); the GPUs it had."""
    k = _end_index(parts, p, end, job)
    gpus = parts.end_g[k]
    last = parts.end_lo[p] + parts.end_n[p] - 1
    for j in range(k, last):
        parts.end_t[j] = parts.end_t[j + 1]
        parts.end_j[j] = parts.end_j[j + 1]
        parts.end_g[j] = parts.end_g[j + 1]
    parts.end_n[p] -= 1
    return gpus


# --- when particular nodes hold a job (backfill) -------------------------------------------
@njit
def _on_one_node(jobs, nodes, node, g):
    """The soonest expected time `node` has `g` GPUs free (-INF: now; INF: never, or a node
    too small): its jobs' GPUs added up in the order of their expected ends."""
    if nodes.cap[node] < g:
        return INF
    free = nodes.free[node]
    if free >= g:
        return -INF
    slot_job, slot_gpus, expected = nodes.slot_job, nodes.slot_gpus, jobs.expected_end
    slots = slot_job.shape[1]
    last = -INF
    while True:  # the next expected end after `last`, with every job ending then
        at = INF
        for s in range(slots):
            v = slot_job[node, s]
            if v >= 0 and last < expected[v] < at:
                at = expected[v]
        if at == INF:
            return INF
        for s in range(slots):
            v = slot_job[node, s]
            if v >= 0 and expected[v] == at:
                free += slot_gpus[node, s]
        if free >= g:
            return at
        last = at


@njit
def _idle_times(jobs, nodes, parts, p):
    """Bring the partition's sorted idle times of full-size nodes (their jobs' last expected
    end; -INF: idle now) up to date: the nodes touched since are taken out and sorted in."""
    lo = parts.idle_lo[p]
    n = parts.full_n[p]
    vals = parts.idle_vals
    for k in range(parts.stale_n[p]):
        node = parts.stale[lo + k]
        nodes.idle_stale[node] = False
        old = nodes.idle_of[node]
        i = lo  # remove one `old`
        while vals[i] < old:
            i += 1
        for j in range(i, lo + n - 1):
            vals[j] = vals[j + 1]
        new = -INF
        for s in range(nodes.slot_job.shape[1]):
            v = nodes.slot_job[node, s]
            if v >= 0 and jobs.expected_end[v] > new:
                new = jobs.expected_end[v]
        nodes.idle_of[node] = new
        i = lo + n - 1  # insert `new` after its equals
        while i > lo and vals[i - 1] > new:
            vals[i] = vals[i - 1]
            i -= 1
        vals[i] = new
    parts.stale_n[p] = 0


@njit
def node_earliest(jobs, nodes, parts, p, g, t):
    """The earliest time particular nodes hold a job of `g` whole GPUs, from the running
    jobs' expected ends (start + limit) on each node: one node with `g` free, or, for a job
    larger than a node, `ceil(g / node)` whole idle nodes. The pooled profile alone would find
    `g` free GPUs spread over several nodes and reserve too early: every backfill pass then
    holds the partition's free GPUs for a job that cannot start on them (calibration,
    docs/replay.md). Kept per node and per partition until a node changes (`touch`)."""
    per = parts.max_cap[p]
    if g <= per:
        gi = int(g)
        if parts.emin_ver[p, gi - 1] == parts.ver[p]:
            best = parts.emin_val[p, gi - 1]
        else:
            best = INF
            e_val, e_ver, ver = nodes.e_val, nodes.e_ver, nodes.ver
            for node in range(parts.node_lo[p], parts.node_hi[p]):
                if e_ver[gi - 1, node] != ver[node]:
                    e_val[gi - 1, node] = _on_one_node(jobs, nodes, node, gi)
                    e_ver[gi - 1, node] = ver[node]
                e = e_val[gi - 1, node]
                if e < best:
                    best = e
            parts.emin_val[p, gi - 1] = best
            parts.emin_ver[p, gi - 1] = parts.ver[p]
    else:
        need = -(-int(g) // per)
        _idle_times(jobs, nodes, parts, p)
        best = parts.idle_vals[parts.idle_lo[p] + need - 1] if parts.full_n[p] >= need else INF
    return best if best > t else t
