"""A broker's topic table seeded before its first start (spec `seed_topics`): the topic config file
RocketMQ loads at start, `<store>/config/topics.json` (BrokerPathConfigHelper.getTopicConfigPath,
4.x and 5.x), written only when absent. Each topic as TopicConfig serializes it for a consumer
group's %RETRY% topic (one queue each way, perm 6: ClientManageProcessor / createTopicInSendMessage-
BackMethod); 5.x adds `attributes`. The broker adds its system topics to what it loads."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rmqchaos.rocketmq.dist import major
from rmqchaos.spec.cluster import SeedTopics

TOPICS_JSON = Path("config") / "topics.json"


def retry_topic(name: str, version: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"order": False, "perm": 6, "readQueueNums": 1, "topicFilterType": "SINGLE_TAG",
                            "topicName": name, "topicSysFlag": 0, "writeQueueNums": 1}
    if major(version) >= 5:
        conf["attributes"] = {}
    return conf


def seeded_table(seed: SeedTopics, version: str) -> dict[str, dict[str, Any]]:
    return {t: retry_topic(t, version) for t in (f"%RETRY%{seed.prefix}{i}" for i in range(seed.retry_groups))}


def write(store: Path, seed: SeedTopics, version: str) -> int:
    """Write the seeded table into `store` unless the broker already has a topic config; the topics
    written (0: it had one)."""
    f = store / TOPICS_JSON
    if f.exists():
        return 0
    table = seeded_table(seed, version)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({"dataVersion": {"counter": 0, "timestamp": int(time.time() * 1000)},
                               "topicConfigTable": table}, separators=(",", ":")))
    tmp.rename(f)
    return len(table)


def seeded_bytes(seed: SeedTopics, version: str) -> int:
    """The seeded entries' bytes in the table's JSON as a registration carries it (each entry's
    constant and its name twice), without building the table."""
    one = f"%RETRY%{seed.prefix}0"
    constant = len(json.dumps(one)) + 1 + len(json.dumps(retry_topic(one, version), separators=(",", ":"))) + 1 - 2 * len(one)
    names = sum(len(f"%RETRY%{seed.prefix}") + len(str(i)) for i in range(seed.retry_groups))
    return seed.retry_groups * constant + 2 * names
