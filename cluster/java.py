"""Find a usable `java` and build the JVM command lines for RocketMQ's nodes."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from rmqchaos.errors import UserError

MIN_JAVA = 11  # RocketMQ 5.x jars are Java 8 bytecode; the JVM options used here (-Xlog) need 9+; 11 is LTS


def find_java() -> tuple[str, int, str]:
    """(path, major version, version line) of the java to use: $JAVA_HOME/bin/java, else PATH."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
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
