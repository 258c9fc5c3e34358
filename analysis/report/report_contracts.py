"""The report's sections on the contracts of an ordered or a transactional load (issue 50): what the
verdict's clause says in a line, as tables a person can read. Per-key order by anomaly, by cause,
the windows in which it broke (on the plots' time axis) and examples; the transaction classes. Each
section is (title, note, rows, head); analysis/report/report.py renders them."""
from __future__ import annotations

from typing import Any

from analysis.contracts.order import window_seconds

Section = tuple[str, str, list[list[Any]], list[str]]

ORDER_ANOMALIES = (("reordered", "reordered: came after a higher number of its key (an inversion)"),
                   ("repeat_out_of_order", "repeated out of order: delivered again after a higher number (a replay)"),
                   ("gap", "gap: never delivered, though a later one of its key was"),
                   ("repeat_in_order", "repeated in order (not an anomaly)"))
TXN_CLASSES = (("committed_delivered", "committed and delivered"),
               ("committed_lost", "committed and LOST"),
               ("committed_undelivered_at_stop", "committed, undelivered at stop (not verified)"),
               ("rolled_back", "rolled back, not delivered"),
               ("rolled_back_delivered", "rolled back and DELIVERED all the same"),
               ("unknown_in_time", "ended unknown, resolved by a check-back in time"),
               ("unknown_late", "ended unknown, resolved late"),
               ("unknown_never", "ended unknown, never resolved"),
               ("undecided", "no decision recorded"),
               ("discarded", "discarded by the broker after transactionCheckMax check-backs"))
EXAMPLE_SEQS = 20  # numbers shown of an example key's delivery order


def order_sections(s: dict[str, Any]) -> list[Section]:
    """An ordered load's sections; none for any other load."""
    o = s.get("order")
    if not o:
        return []
    k, m = o["keys_by_anomaly"], o["messages_by_anomaly"]
    bad = o["keys"] - o["keys_in_order"]
    out: list[Section] = [(
        "Per-key order", f"{bad:,} of {o['keys']:,} sharding keys broke order over {o['messages']:,} deliveries. A key "
        "counts under each anomaly it showed; the messages are the deliveries of each kind.",
        [[w, k.get(a, 0), m.get(a, 0)] for a, w in ORDER_ANOMALIES], ["anomaly", "keys", "messages"])]
    c = o.get("causes")
    if c and bad:
        homes = o.get("keys_by_home_broker") or {}
        mc = c.get("messages") or {}  # absent in summaries before it
        mb = mc.get("by_home_broker") or {}
        out.append(("Why order broke", "A key moved when its messages were sent to more than one queue (a route "
                    "change); it stayed when all went to one. The broker is where its first acknowledged message went.",
                    [["moved to another queue", c["moved"], mc.get("moved", ""), ""],
                     ["stayed on its queue", c["stayed"], mc.get("stayed", ""), ""],
                     *[[f"first sent to {b}", n, mb.get(b, ""), f"of {homes[b]:,} keys there" if b in homes else ""]
                       for b, n in c["by_home_broker"].items()]],
                    ["cause", "keys that broke order", "their anomalous messages", ""]))
    ws = o.get("windows") or []
    if ws:
        at = window_seconds(s)
        out.append(("When order broke", "Seconds in which a delivery broke its key's order, joined when close"
                    + (", on the plots' time axis (0: the first attempt)." if at is not None else "."),
                    [[i + 1, *(at[i] if at is not None else ("", "")), (w["end_ms"] - w["start_ms"]) // 1000]
                     for i, w in enumerate(ws)],
                    ["window", "from (s)", "to (s)", "seconds"]))
    ex = o.get("examples") or []
    if ex:
        out.append(("Examples", "Each key's numbers in the order they were delivered.",
                    [[e["shard_key"], ", ".join(str(x) for x in e["seqs"][:EXAMPLE_SEQS])
                      + (", ..." if len(e["seqs"]) > EXAMPLE_SEQS else "")] for e in ex],
                    ["sharding key", "delivered in this order"]))
    return out


def transaction_sections(s: dict[str, Any]) -> list[Section]:
    """A transactional load's section; none for any other load."""
    t = s.get("transactions")
    if not t:
        return []
    c = t["classes"]
    rows = [[w, c.get(n, 0)] for n, w in TXN_CLASSES]
    rows += [[w, t[n]] for n, w in (("extra_deliveries", "extra deliveries of committed keys"),
                                    ("abandoned", "left without an end by a producer crash"),
                                    ("checked_after_end", "asked about by the broker after their end")) if t.get(n)]
    return [("Transactions", f"{t['keys']:,} half messages stored, each in one class by the application's decision "
             "(the transaction ledger), the broker's check-backs and the deliveries.", rows, ["class", "half messages"])]


def contract_sections(s: dict[str, Any]) -> list[Section]:
    return order_sections(s) + transaction_sections(s)
