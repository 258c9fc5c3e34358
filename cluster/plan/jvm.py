"""Find a usable `java`, and the one builder of every JVM command line the platform runs (nodes,
RocketMQ's tools, the consumer, benchmarks, the OOM agent)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from typing import Mapping, Sequence

from rmqchaos.rocketmq import grpc_client, dist as rocketmq_dist
from rmqchaos.errors import UserError

MIN_JAVA = 11  # RocketMQ 5.x jars are Java 8 bytecode; the JVM options used here (-Xlog) need 9+; 11 is LTS


def find_java() -> tuple[str, int, str]:
    """(path, major version, version line) of the java to use: $JAVA_HOME/bin/java, else PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and not os.access(Path(home) / "bin" / "java", os.X_OK):
        raise UserError(f"JAVA_HOME={home} has no executable bin/java",
                        f"point JAVA_HOME at a Java {MIN_JAVA}+ installation or unset it to use the java on PATH")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java:
        raise UserError("java not found (no $JAVA_HOME/bin/java, none on PATH)",
                        f"install Java {MIN_JAVA}+ (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"{java} -version failed: {e}", f"install Java {MIN_JAVA}+ or set JAVA_HOME") from None
    text = (out.stderr or "") + (out.stdout or "")
    m = re.search(r'version "([^"]+)"', text)
    if not m:
        raise UserError(f"cannot read the version of {java}: {text.strip()[:120]!r}",
                        f"install Java {MIN_JAVA}+ or set JAVA_HOME")
    parts = m.group(1).split(".")
    major = int(parts[1]) if parts[0] == "1" else int(re.match(r"\d+", parts[0]).group(0))  # type: ignore[union-attr]
    line = text.strip().splitlines()[0]
    if major < MIN_JAVA:
        raise UserError(f"{java} is Java {m.group(1)}, too old",
                        f"install Java {MIN_JAVA}+ (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME")
    return java, major, line


def jcmd() -> str:
    """The jcmd beside the java that runs the nodes (reads a JVM's own clock: cluster/substrate/clock.py)."""
    return str(Path(find_java()[0]).parent / "jcmd")


def javac_command(sources: Sequence[Path], out: Path, cp: str) -> list[str]:
    """`javac` (beside the java that runs the nodes) compiling `sources` against `cp` into `out`: a reproduction's
    JUnit tests (pipeline/workflows/repro.py)."""
    return [str(Path(find_java()[0]).parent / "javac"), "-nowarn", "-encoding", "UTF-8", "-d", str(out), "-cp", cp,
            *map(str, sources)]


def platform_jar(version: str) -> str:
    """The platform's own Java module (consumer, OOM agent, config-key reader)."""
    return str(rocketmq_dist.rocketmq_home(version) / "rmqchaos-java.jar")


def classpath(version: str, platform_jar: bool = False) -> str:
    """The jars of a RocketMQ version (and the platform's own module first, when asked)."""
    home = rocketmq_dist.rocketmq_home(version)
    cp = f"{home / 'lib'}/*"
    return f"{home / 'rmqchaos-java.jar'}:{cp}" if platform_jar else cp


def grpc_classpath(version: str, client_version: str | None = None) -> str:
    """The platform's module and the 5.x gRPC client alone (its programs GrpcProducer, GrpcConsumer): no
    remoting client and no server jar beside the shaded client. `client_version`: another client than
    pom.xml's (rmqchaos/rocketmq/grpc_client.py)."""
    home = rocketmq_dist.rocketmq_home(version)
    jars = home / "grpc" if client_version in (None, grpc_client.pinned()) else grpc_client.ensure(client_version)
    return f"{home / 'rmqchaos-java.jar'}:{jars}/*"


#: RocketMQ 4.x reflects on JDK internals that Java 17 closes: its store unmaps files through
#: DirectByteBuffer.attachment() and cleaner() (a restarted 4.9.7 broker exited in IndexService.load with
#: InaccessibleObjectException), and 4.6.0's Netty 4.0 reads Buffer.address at start (every 4.6.0 client
#: JVM failed: PlatformDependent0). Every JVM on a 4.x release's jars gets them; 5.x's none.
JDK_OPENS_4X = ("--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
                "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED")


def jvm_command(main: str, args: Sequence[str] = (), *, cp: str, heap_mb: int, xms_mb: int | None = None,
                java: str | None = None, user_home: Path | None = None, rocketmq_home: Path | None = None,
                options: Sequence[str] = (), system_properties: Mapping[str, object] | None = None,
                client: bool = False, version: str | None = None) -> list[str]:
    """`java [memory] [options] [-D...] -cp CP MAIN ARGS`.

    client: a short-lived client-side JVM (tools, benchmark producer): serial GC and C1 only, which
    start fastest and leave the cores to the brokers.
    version: the RocketMQ release whose jars `cp` holds (4.x: JDK_OPENS_4X).
    Every JVM uses IPv4 sockets, so the loopback bind() shim maps 0.0.0.0 to 127.0.0.1 for the nodes.
    """
    cmd = [java or find_java()[0]]
    if not client:
        cmd.append("-server")
    cmd += [f"-Xms{xms_mb if xms_mb is not None else heap_mb}m", f"-Xmx{heap_mb}m"]
    if client:
        cmd += ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    cmd += list(options)
    if version is not None and rocketmq_dist.major(version) == 4:
        cmd += JDK_OPENS_4X
    cmd.append("-Djava.net.preferIPv4Stack=true")
    if user_home is not None:  # RocketMQ writes its logs and namesrv kv config under user.home
        cmd.append(f"-Duser.home={user_home}")
    if rocketmq_home is not None:
        cmd.append(f"-Drocketmq.home.dir={rocketmq_home}")
    cmd += [f"-D{k}={('true' if v else 'false') if isinstance(v, bool) else v}"
            for k, v in (system_properties or {}).items()]
    return [*cmd, "-cp", cp, main, *args]


def java_home() -> str:
    """The installation directory of the java `find_java` chose (for Spark, which reads JAVA_HOME)."""
    return str(Path(os.path.realpath(find_java()[0])).parent.parent)
