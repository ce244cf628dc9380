"""Build small sacct -P texts for metric and recommendation tests (epoch times)."""

B = 1764547200  # 2025-12-01T00:00:00Z
HEADER = (
    "JobIDRaw|JobID|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|TimelimitRaw|State|"
    "AllocTRES|TRESUsageInMax|AdminComment"
)


def job(raw, part, submit, start, end, alloc, *, state="COMPLETED", qos="normal", user="u",
        usage=None, tl=600, admin=""):  # fmt: skip
    """An allocation row (+ a .batch step carrying `usage` when given); times are offsets."""
    el = 0 if start is None else end - start
    st = "None" if start is None else B + start
    en = "Unknown" if end is None else B + end
    lines = [
        f"{raw}|{raw}|{part}|{qos}|acct|{user}|{B + submit}|{st}|{en}|{el}|{tl}|{state}|"
        f"{alloc}||{admin}"
    ]
    if usage is not None:
        lines.append(
            f"{raw}.batch|{raw}.batch||||{user}|{st}|{st}|{en}|{el}||{state}|{alloc}|{usage}|"
        )
    return lines


def text(rows):
    return HEADER + "\n" + "\n".join(line for r in rows for line in r) + "\n"
