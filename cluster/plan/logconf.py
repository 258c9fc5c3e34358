"""A 4.x server or tool reads its logging setup from the distribution's files,
`<rocketmq.home.dir>/conf/logback_{namesrv,broker,tools}.xml` (NamesrvStartup, BrokerStartup and
MQAdminStartup call JoranConfigurator.doConfigure on them and exit without them); 5.x configures its
logging from its own jars. The files are the 4.6.0 release's (distribution/conf, Apache-2.0, in
cluster/plan/rocketmq4/): 4.9.x's differ only by an optional per-broker log directory
(`isolateLogEnable`), off by default, so the logs land where the platform reads them on every 4.x."""
from __future__ import annotations

import shutil
from pathlib import Path

from rmqchaos.machine import paths
from rmqchaos.rocketmq.dist import major

FILES = paths.REPO / "cluster" / "plan" / "rocketmq4"
ROLES = ("namesrv", "broker", "tools")


def write(home: Path, version: str, role: str) -> None:
    """Into `home`/conf the logging file a 4.x `role` (namesrv, broker, tools) reads; nothing for 5.x."""
    assert role in ROLES, role
    if major(version) != 4:
        return
    (home / "conf").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FILES / f"logback_{role}.xml", home / "conf" / f"logback_{role}.xml")
