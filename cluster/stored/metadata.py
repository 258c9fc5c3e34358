"""What a broker knows besides its messages: its topics, subscription groups and consumer offsets,
asked of the running broker, or read from its store's config files as a restart will load them, and
what it forgot between the two (after a power loss: the files it never fsynced).

RocketMQ 5.5.0 keeps each table in `<store>/config/<name>.json` (ConfigManager): it copies the file
to `.bak`, rewrites it in place (no fsync) on every change (topics, groups) or every
`flushConsumerOffsetInterval` (5 s, offsets), and loads the file at start, or its `.bak` when the
file is empty or does not parse (ConfigManager.load, loadBak).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rmqclient.admin import AdminClient, offset_table
from rmqclient.frame import loads_lenient

FILES = {"topics": "topics.json", "groups": "subscriptionGroup.json", "offsets": "consumerOffset.json"}


def asked(addr: str, timeout: float = 3.0) -> dict[str, Any]:
    """The running broker's tables: {"topics": [names], "groups": [names], "offsets": {"topic@group":
    {queue: offset}}}. Raises RemotingError if it does not answer."""
    a = AdminClient("", timeout=timeout)
    return {"topics": sorted(a.topic_configs(addr)), "groups": sorted(a.group_configs(addr)),
            "offsets": a.consumer_offsets(addr)}


def _load(f: Path) -> tuple[dict[str, Any] | None, str]:
    """A config file as the broker loads it: the file, else its .bak; (None, why) if neither parses."""
    for path in (f, f.with_name(f.name + ".bak")):
        try:
            text = path.read_text()
        except OSError:
            continue
        if not text.strip():
            continue
        try:
            return loads_lenient(text), path.name
        except ValueError:  # json.JSONDecodeError among them
            continue
    return None, f"neither {f.name} nor its .bak holds a table"


def on_disk(config_dir: Path) -> dict[str, Any]:
    """The tables a broker started on this store would load, in `asked`'s form, and from which file
    each came (`sources`: the file, its .bak, or why neither)."""
    tables: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for what, name in FILES.items():
        doc, sources[what] = _load(config_dir / name)
        doc = doc or {}
        if what == "topics":
            tables[what] = sorted(doc.get("topicConfigTable") or {})
        elif what == "groups":
            tables[what] = sorted(doc.get("subscriptionGroupTable") or {})
        else:
            tables[what] = offset_table(doc)
    return {**tables, "sources": sources}


def forgot(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What `after` lacks of `before`: topics and groups gone, and every consumer offset that went back
    (or is gone: `after` None), with how many messages of consumption that is in all."""
    back = []
    for key, queues in sorted(before.get("offsets", {}).items()):
        topic, _, group = key.partition("@")
        now = after.get("offsets", {}).get(key, {})
        for q, off in sorted(queues.items()):
            a = now.get(q)
            if a is None or a < off:
                back.append({"topic": topic, "group": group, "queue": q, "before": off, "after": a})
    return {"topics_lost": sorted(set(before.get("topics", [])) - set(after.get("topics", []))),
            "groups_lost": sorted(set(before.get("groups", [])) - set(after.get("groups", []))),
            "offsets_back": back, "messages_back": sum(b["before"] - (b["after"] or 0) for b in back)}
