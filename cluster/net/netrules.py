"""iptables rules on loopback in chains the platform owns (docs/safety.md): DROPs for partitions,
DNATs that send one link's new connections through a Toxiproxy proxy (link faults).

    filter OUTPUT --(1st rule)--> RMQCHAOS --(comment rmqchaos:<run id>)--> RMQC-<digest of run id> --> DROPs
    nat    OUTPUT --(1st rule)--> RMQCHAOS --(comment rmqchaos:<run id>)--> RMQC-<digest of run id> --> DNATs

The nat table has the same chain names and the same ownership (comments, lock, reaping); a DNAT
matches only a connection's SYN (conntrack keeps the decision for the rest), so an established
connection is never redirected. Before a DNAT goes in, `forget_flows` deletes conntrack's entries
for its (source, destination, port): a stale one would keep a new connection from the same source
port off the proxy (below).

Loopback packets traverse OUTPUT once on their way out, so one DROP there stops them; each rule
carries `rmqchaos:<run id>:<fault id>` so a leftover rule says whose it is. Only addresses inside
127.0.0.0/8 can be named (`rmqchaos.machine.loopback`); every one is checked before any chain is touched.
Chain names: `RMQC-` + 12 hex digits of sha256(run id). Run ids start with their creation time
(`20261127T122500-…`), so a prefix of the run id would be the same for every run of a day.

Whose a chain is: `reap` asks whether its run is still live. A run is registered in the
$RMQCHAOS_HOME that started it, and several homes (two suites, two users) may share this host's
tables, so each chain's owner file (`OWNERS/<chain>`) holds the path of its run's registry entry:
a chain is reaped only once that entry is gone, whichever home the reaper has.

Every change is made under one file lock, so that one run's `remove()` never deletes the parent
chain while another run is adding its own, and a run chain is created together with its jump (one
`iptables-restore --noflush`): a run chain with no jump and no rule is a leftover, not one being built.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

from rmqchaos.errors import UserError
from rmqchaos.machine.loopback import loopback, port
from rmqchaos.run.rundir import registry_dir
from rmqchaos.machine.wait import poll_until

PARENT = "RMQCHAOS"
FILTER, NAT = "filter", "nat"
TABLES = (FILTER, NAT)
PREFIX = "RMQC-"
TAG = "rmqchaos"
WAIT_S = 10  # `--wait=10`: wait at most this long for the xtables lock (a plain -w waits forever)
LOCK = Path("/run/lock" if os.path.isdir("/run/lock") else "/tmp") / "rmqchaos-netrules.lock"
OWNERS = LOCK.parent / "rmqchaos-netrules"  # <chain> -> its run's registry entry (a path)
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")  # run and fault ids: they go into a comment unquoted by the shell
_COMMENT = re.compile(r'--comment "?rmqchaos:([A-Za-z0-9._-]+)(?::([A-Za-z0-9._-]+))?"?')


def chain_name(run_id: str) -> str:
    return PREFIX + hashlib.sha256(_ident(run_id, "run id").encode()).hexdigest()[:12]


class RunRules:
    """The DROP rules of one run, in its own chain. Removing is idempotent."""

    def __init__(self, run_id: str, registered_at: Path | None = None) -> None:
        self.run_id = _ident(run_id, "run id")
        self.chain = chain_name(run_id)
        # the run's registry entry in the home that runs it (rmqchaos.run.rundir.registry_dir)
        self.registered_at = registered_at or registry_dir() / self.run_id

    def drop(self, src: str, dst: str, *, tag: str, dport: int | None = None, sport: int | None = None) -> str:
        """DROP tcp packets from `src` to `dst` (optionally only to/from a port); returns the rule.

        A DROP without a port breaks TCP both ways between the pair: a handshake from `dst` to
        `src` needs `src`'s SYN-ACK, which this drops too. `dport` (the listening node's port)
        narrows it to connections from `src` to that listener."""
        spec = ["-s", loopback(src), "-d", loopback(dst), "-p", "tcp"]
        if dport is not None:
            spec += ["--dport", str(port(dport))]
        if sport is not None:
            spec += ["--sport", str(port(sport))]
        spec += ["-m", "comment", "--comment", f"{TAG}:{self.run_id}:{_ident(tag, 'fault id')}", "-j", "DROP"]
        return self._add(FILTER, spec)

    def dnat(self, src: str, dst: str, dport: int, to: tuple[str, int], *, tag: str) -> str:
        """Send new tcp connections from `src` to `dst:dport` to `to` (address, port) instead, in
        the nat table; returns the rule. Replies are translated back by conntrack, so the client
        sees `dst:dport` answer."""
        # --syn: only a connection's first packet. nat sees every packet of a connection conntrack
        # did not track yet (loopback connections opened before any nat rule existed: measured here,
        # conntrack picks them up mid-stream), and a mid-stream packet sent to the proxy is answered
        # with a reset; with --syn such a connection gets no translation and goes on untouched.
        spec = ["-s", loopback(src), "-d", loopback(dst), "-p", "tcp", "--syn", "--dport", str(port(dport)),
                "-m", "comment", "--comment", f"{TAG}:{self.run_id}:{_ident(tag, 'fault id')}",
                "-j", "DNAT", "--to-destination", f"{loopback(to[0])}:{port(to[1])}"]
        return self._add(NAT, spec)

    def _add(self, table: str, spec: list[str]) -> str:
        with _locked():
            self._ensure(table)
            if _ipt("-C", self.chain, *spec, check=False, table=table).returncode != 0:  # the same rule twice: once
                _ipt("-A", self.chain, *spec, table=table)
        return shlex.join([*(("-t", table) if table != FILTER else ()), "-A", self.chain, *spec])

    def cut(self, a: str, b: str, *, tag: str, port: int | None = None, symmetric: bool = True) -> list[str]:
        """Cut `a` from `b`. port=None: every packet a->b (and b->a if symmetric). port=P (b's
        listener): a's packets to b:P, and if symmetric b's packets from P back to a, so an open
        connection is dead both ways while b's own connections to a are untouched."""
        rules = [self.drop(a, b, dport=port, tag=tag)]
        if symmetric:
            rules.append(self.drop(b, a, sport=port, tag=tag))
        return rules

    def rules(self, table: str = FILTER) -> list[str]:
        """This run's rules in `table` as `iptables -S` prints them ([] when it has none)."""
        return [ln for ln in _list(self.chain, table) if ln.startswith("-A ")]

    def tagged(self, tag: str, table: str = FILTER) -> list[str]:
        """One fault's rules in `table` as the kernel lists them: what is in force, not what was asked."""
        want = f"{self.run_id}:{_ident(tag, 'fault id')}"
        return [ln for ln in self.rules(table) if _owner(ln) == want]

    def remove_tag(self, tag: str) -> int:
        """Remove one fault's rules (both tables); returns how many were removed."""
        want = f"{self.run_id}:{_ident(tag, 'fault id')}"
        n = 0
        with _locked():
            for table in TABLES:
                for ln in _list(self.chain, table):
                    if ln.startswith("-A ") and _owner(ln) == want:
                        _ipt("-D", *shlex.split(ln)[1:], check=False, table=table)
                        n += 1
        return n

    def remove(self) -> int:
        """Remove the run's chains and their jumps (both tables), and a table's parent chain once
        no run chain is left in it."""
        with _locked():
            return sum(_remove_chain(self.chain, table) for table in TABLES)

    def _ensure(self, table: str = FILTER) -> None:
        _ensure_parent(table)
        jump = _jump_spec(self.chain, self.run_id)
        if not _list(self.chain, table):
            # whose it is, once, as the chain is created (not at every rule)
            OWNERS.mkdir(parents=True, exist_ok=True)
            (OWNERS / self.chain).write_text(str(self.registered_at.absolute()))
            # the chain and its jump in one transaction (see the module's docstring)
            _ipt(stdin=f"*{table}\n:{self.chain} - [0:0]\n{shlex.join(['-A', PARENT, *jump])}\nCOMMIT\n",
                 cmd="iptables-restore")
        elif _ipt("-C", PARENT, *jump, check=False, table=table).returncode != 0:
            _ipt("-A", PARENT, *jump, table=table)


def available() -> bool:
    """Whether iptables is here at all: without it no rule of ours can exist, so cleanup skips it."""
    return bool(shutil.which("iptables") or shutil.which("iptables", path="/usr/sbin:/sbin"))


def remove_run(run_id: str) -> list[str]:
    """`down`'s part: remove the run's chain if it has one; one line if it did."""
    if not available():
        return []
    rr = RunRules(run_id)
    out = []
    for table in TABLES:
        if _list(rr.chain, table):
            with _locked():
                n = _remove_chain(rr.chain, table)
            out.append(f"removed iptables {_what(table)} {rr.chain} ({n} rule(s))")
    return out


def reap_unregistered(is_registered: Callable[[str], bool]) -> list[str]:
    """Orphan reaping's part: the chains of runs no longer registered (a SIGKILLed run's, once
    `down --all` forgot it) are removed; a registered run's chain stays for its own `down`. A chain
    with an owner file is live while the registry entry it names exists (in whatever home);
    `is_registered` (this home's registry) decides only for a chain without one."""
    return reap(lambda run: registered(run, is_registered)) if available() and any(chains(t) for t in TABLES) else []


def registered(run_id: str, fallback: Callable[[str], bool]) -> bool:
    """Whether the run that owns `run_id`'s chain is still registered, by its owner file."""
    try:
        return Path((OWNERS / chain_name(run_id)).read_text().strip()).exists()
    except (OSError, UserError):
        return fallback(run_id)


def chains(table: str = FILTER) -> list[str]:
    """The run chains present in `table` (`RMQC-…`), whoever's they are."""
    return [ln.split()[1] for ln in _ipt("-S", table=table).stdout.splitlines()
            if ln.startswith("-N " + PREFIX)]


def owners(table: str = FILTER) -> dict[str, str | None]:
    """Run chain -> its run id (from its jump's comment, else its rules'); None if nothing names it."""
    jumps = {ln.split(" -j ")[-1].strip(): _owner(ln) for ln in _list(PARENT, table) if " -j " + PREFIX in ln}
    out: dict[str, str | None] = {}
    for ch in chains(table):
        run = jumps.get(ch)
        if run is None:
            run = next((o.split(":")[0] for o in map(_owner, _list(ch, table)) if o), None)
        out[ch] = run
    return out


def reap(is_live: Callable[[str], bool]) -> list[str]:
    """Remove the chains of runs that are no longer live (a SIGKILLed run's leftovers); one line each.

    A chain nothing attributes to a run has no jump and no rule: it drops nothing, and under the
    lock nobody is between creating it and its jump, so it is removed too."""
    done: list[str] = []
    with _locked():
        for table in TABLES:
            for ch, run in owners(table).items():
                if run is not None and is_live(run):
                    continue
                n = _remove_chain(ch, table)
                done.append(f"run {run or '(unknown)'}: removed iptables {_what(table)} {ch} ({n} rule(s))")
            if not chains(table):
                _remove_parent(table)
    return done


def _what(table: str) -> str:
    # the filter table's lines read as they always did ("removed iptables chain …")
    return "chain" if table == FILTER else f"{table} chain"


# --- internals -------------------------------------------------------------------------------

def _ident(s: str, what: str) -> str:
    if not isinstance(s, str) or not _NAME.fullmatch(s):
        raise UserError(f"{what} {s!r} cannot name an iptables rule", "use letters, digits, '.', '_' and '-' only")
    return s


def _owner(line: str) -> str | None:
    """'<run id>' or '<run id>:<fault id>' from a rule line's comment."""
    m = _COMMENT.search(line)
    if m is None:
        return None
    return m.group(1) if m.group(2) is None else f"{m.group(1)}:{m.group(2)}"


def forget_flows(src: str, dst: str, dport: int) -> int:
    """Delete conntrack's entries for tcp `src` -> `dst:dport` (`conntrack -D`); returns how many.

    Why: conntrack tracks loopback only while a nat chain exists and picks a connection up
    mid-stream (nf_conntrack_tcp_loose), so a connection that was open when a DNAT came and closed
    after the last nat rule went stays ESTABLISHED in the table for days (its FIN was never seen;
    measured: one such entry per link fault's test). A new connection whose source port repeats
    one of them has its SYN taken as part of that flow: nat never sees a first packet and the
    connection goes direct, around the proxy. Deleting the entries of a live connection is harmless:
    its next packet is picked up again, mid-stream, which a --syn DNAT leaves alone."""
    argv = [_binary("conntrack"), "-D", "-p", "tcp", "-s", loopback(src), "-d", loopback(dst),
            "--dport", str(port(dport))]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise UserError(f"{shlex.join(argv)} did not finish in 30s", "is conntrack working here?") from None
    m = re.search(r"(\d+) flow entries have been deleted", r.stderr)
    if m is None:  # exit 1 with the count line when nothing matched; anything else is an error
        err = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise UserError(f"{shlex.join(argv)} failed: {err}", "network faults need root (CAP_NET_ADMIN)")
    return int(m.group(1))


def _binary(name: str) -> str:
    # root's tools live in /usr/sbin, which a non-login PATH may lack
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        raise UserError(f"{name} not found (network faults need it)",
                        f"install it: apt-get install {'conntrack' if name == 'conntrack' else 'iptables'}")
    return path


def _ipt(*args: str, check: bool = True, stdin: str | None = None, cmd: str = "iptables",
         table: str = FILTER) -> subprocess.CompletedProcess:
    if table not in TABLES:
        raise ValueError(f"table {table!r}")
    tbl = ("-t", table) if cmd == "iptables" and table != FILTER else ()
    argv = [_binary(cmd), f"--wait={WAIT_S}", *(("--noflush",) if cmd == "iptables-restore" else ()), *tbl, *args]
    try:
        r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=WAIT_S + 20)
    except subprocess.TimeoutExpired:
        raise UserError(f"{cmd} {' '.join(args)} did not finish in {WAIT_S + 20}s", "is the xtables lock held?") from None
    if check and r.returncode != 0:
        err = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise UserError(f"{shlex.join([cmd, *args])} failed: {err}",
                        "network rules need root (CAP_NET_ADMIN) and a working iptables")
    return r


def _list(chain: str, table: str = FILTER) -> list[str]:
    """`iptables -S CHAIN` lines, [] if there is no such chain (iptables-nft then says 'incompatible')."""
    r = _ipt("-S", chain, check=False, table=table)
    return r.stdout.splitlines() if r.returncode == 0 else []


def _ensure_parent(table: str = FILTER) -> None:
    if _ipt("-N", PARENT, check=False, table=table).returncode != 0 and not _list(PARENT, table):
        _ipt("-N", PARENT, table=table)  # it failed for another reason than "exists": let that one surface
    # first in OUTPUT, so no ACCEPT of the host's own rules lets loopback traffic past it
    if _ipt("-C", "OUTPUT", "-j", PARENT, check=False, table=table).returncode != 0:
        _ipt("-I", "OUTPUT", "1", "-j", PARENT, table=table)


def _remove_parent(table: str = FILTER) -> None:
    for _ in range(100):  # each pass deletes one jump (normally there is exactly one)
        if _ipt("-D", "OUTPUT", "-j", PARENT, check=False, table=table).returncode != 0:
            break
    if _list(PARENT, table):
        _ipt("-F", PARENT, table=table)
        _ipt("-X", PARENT, table=table)


def _jump_spec(chain: str, run_id: str) -> list[str]:
    return ["-m", "comment", "--comment", f"{TAG}:{run_id}", "-j", chain]


def _remove_chain(chain: str, table: str = FILTER) -> int:
    rules = [ln for ln in _list(chain, table) if ln.startswith("-A ")]
    for ln in _list(PARENT, table):  # every jump to it, whatever its comment
        if ln.startswith("-A ") and ln.split(" -j ")[-1].strip() == chain:
            _ipt("-D", *shlex.split(ln)[1:], check=False, table=table)
    if _list(chain, table):
        _ipt("-F", chain, table=table)
        _ipt("-X", chain, table=table)
    if not any(ln.startswith("-A ") for ln in _list(PARENT, table)):
        _remove_parent(table)
    if not any(_list(chain, t) for t in TABLES):
        (OWNERS / chain).unlink(missing_ok=True)
    return len(rules)


@contextlib.contextmanager
def _locked(timeout: float = 30) -> Iterator[None]:
    with open(LOCK, "a") as f:
        poll_until(lambda: _try_lock(f.fileno()), timeout, f"the network rules' lock {LOCK}", interval=0.05,
                   hint="another rmqchaos process is changing iptables rules")
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
