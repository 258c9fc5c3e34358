"""Loading a scenario file: YAML with line numbers, the size guards, `extends:` overlays merged
node by node (so an error in a base names the base's line), and validation into one error per line."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from rmqchaos.errors import UserError
from rmqchaos.spec.checks import semantic_errors
from rmqchaos.spec.messages import SpecError, _allowed_keys, _dotted, _model_at, _pydantic_message
from rmqchaos.spec.scenario import FaultKindSpec, Scenario

def _node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """The deepest YAML node along `loc` (keys for mappings, indexes for sequences)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    node = v
                    break
            else:
                return node
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def _key_node(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    parent = _node_at(root, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _ in parent.value:
            if isinstance(k, yaml.ScalarNode) and k.value == str(loc[-1]):
                return k
    if isinstance(parent, yaml.SequenceNode) and isinstance(loc[-1], int) and loc[-1] < len(parent.value):
        return parent.value[loc[-1]]  # a list's item: its own line
    return parent


def _duplicate_keys(node: yaml.Node | None, loc: tuple[Any, ...] = ()) -> list[tuple[yaml.Node, str]]:
    out: list[tuple[yaml.Node, str]] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                if k.value in seen:
                    out.append((k, f"{_dotted(loc + (k.value,))}: key given twice"))
                seen.add(k.value)
                out += _duplicate_keys(v, loc + (k.value,))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out += _duplicate_keys(v, loc + (i,))
    return out


MAX_EXTENDS = 8  # overlay depth
MAX_NODES = 100_000  # YAML nodes after alias expansion (an alias bomb stops here, at once)
MAX_DEPTH = 64


def _compose(text: str, filename: str) -> yaml.Node | None:
    """The YAML node tree of one document; every node's mark carries `filename`, so errors name the
    file a value came from even after overlays are merged."""
    import io
    stream = io.StringIO(text)
    stream.name = filename  # type: ignore[attr-defined]  (yaml's Reader takes the mark's name from it)
    try:
        root = yaml.compose(stream, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}" if mark else filename
        raise SpecError([f"{where}: not valid YAML: {getattr(e, 'problem', None) or e}"]) from None
    _check_size(root, filename)
    dups = _duplicate_keys(root)
    if dups:
        raise SpecError([f"{_where(n)}: {m}" for n, m in dups])
    return root


def _check_size(root: yaml.Node | None, filename: str) -> None:
    """Refuse recursive aliases, alias bombs and absurd nesting before anything expands them."""
    count = 0
    stack: list[tuple[yaml.Node, int, frozenset[int]]] = [(root, 0, frozenset())] if root is not None else []
    while stack:
        node, depth, path = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise SpecError([f"{filename}: the scenario expands to more than {MAX_NODES} YAML values "
                             "(an alias bomb?): write it out without nested aliases"])
        if depth > MAX_DEPTH:
            raise SpecError([f"{_where(node)}: nested more than {MAX_DEPTH} levels deep"])
        if id(node) in path:
            raise SpecError([f"{_where(node)}: a YAML alias refers to itself (recursive alias)"])
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            inner = path | {id(node)}
            children = [x for kv in node.value for x in kv] if isinstance(node, yaml.MappingNode) else node.value
            stack.extend((c, depth + 1, inner) for c in children)


def _where(node: yaml.Node | None, default: str = "<scenario>") -> str:
    if node is None:
        return f"{default}:1"
    return f"{node.start_mark.name}:{node.start_mark.line + 1}"


def _mapping_get(node: yaml.MappingNode, key: str) -> yaml.Node | None:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def _without(node: yaml.MappingNode, *keys: str) -> yaml.MappingNode:
    return yaml.MappingNode(node.tag, [(k, v) for k, v in node.value
                                       if not (isinstance(k, yaml.ScalarNode) and k.value in keys)],
                            node.start_mark, node.end_mark, node.flow_style)


def _merge(base: yaml.Node, over: yaml.Node) -> yaml.Node:
    """An overlay over its base: mappings merge key by key (recursively), anything else is replaced."""
    if not (isinstance(base, yaml.MappingNode) and isinstance(over, yaml.MappingNode)):
        return over
    out: list[tuple[yaml.Node, yaml.Node]] = []
    over_keys = {k.value: (k, v) for k, v in over.value if isinstance(k, yaml.ScalarNode)}
    for k, v in base.value:
        if isinstance(k, yaml.ScalarNode) and k.value in over_keys:
            ok, ov = over_keys.pop(k.value)
            out.append((ok, _merge(v, ov)))
        else:
            out.append((k, v))
    out += [(k, v) for k, v in over.value if isinstance(k, yaml.ScalarNode) and k.value in over_keys]
    return yaml.MappingNode(over.tag, out, over.start_mark, over.end_mark, over.flow_style)


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file, or one UserError line naming it (unreadable, binary, or another encoding)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read {what}: {e.strerror}", "check the path") from None
    if b"\0" in raw:
        raise UserError(f"{path}: not a {what} file (binary: it holds NUL bytes)", f"pass a YAML {what} file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})",
                        f"save the {what} file as UTF-8") from None


def _resolve(path: Path, chain: tuple[Path, ...] = ()) -> yaml.Node | None:
    """The node tree of `path` with its `extends:` chain merged under it. `name` is never inherited:
    a file without one is named after itself."""
    root = _compose(read_text(path, "scenario"), str(path))
    if not isinstance(root, yaml.MappingNode):
        return root
    ext = _mapping_get(root, "extends")
    if ext is not None:
        if not isinstance(ext, yaml.ScalarNode) or not ext.value:
            raise SpecError([f"{_where(ext)}: extends: expected the path of a base scenario file"])
        base_path = (path.parent / ext.value).resolve()
        if base_path in chain or base_path == path.resolve():
            raise SpecError([f"{_where(ext)}: extends: {ext.value} extends this file again (a cycle)"])
        if len(chain) >= MAX_EXTENDS:
            raise SpecError([f"{_where(ext)}: extends: more than {MAX_EXTENDS} levels of base files"])
        if not base_path.is_file():
            raise SpecError([f"{_where(ext)}: extends: no such file {base_path}"])
        base = _resolve(base_path, chain + (path.resolve(),))
        if not isinstance(base, yaml.MappingNode):
            raise SpecError([f"{_where(ext)}: extends: {ext.value} is not a scenario mapping"])
        root = _merge(_without(base, "name"), _without(root, "extends"))  # type: ignore[assignment]
    assert isinstance(root, yaml.MappingNode)
    if _mapping_get(root, "name") is None:
        key = yaml.ScalarNode("tag:yaml.org,2002:str", "name", root.start_mark, root.start_mark)
        val = yaml.ScalarNode("tag:yaml.org,2002:str", path.stem, root.start_mark, root.start_mark)
        root = yaml.MappingNode(root.tag, [(key, val), *root.value], root.start_mark, root.end_mark, root.flow_style)
    return root


def load_scenario(path: str | Path, fault_kinds: Mapping[str, FaultKindSpec] | None = None) -> Scenario:
    """A scenario file, its `extends:` bases merged under it, validated. With `fault_kinds` (the
    pipeline passes chaos's registry) every fault is checked against its kind too."""
    p = Path(path)
    return _validate(_resolve(p), str(p), fault_kinds)


def resolved_document(path: str | Path) -> dict[str, Any]:
    """A scenario file with its `extends:` bases merged under it, as plain data, not validated
    (what a generated overlay reads of its base, e.g. the config keys a version must take)."""
    root = _resolve(Path(path))
    data = yaml.SafeLoader("").construct_document(root) if root is not None else None
    return data if isinstance(data, dict) else {}


def parse_scenario(text: str, filename: str = "<scenario>",
                   fault_kinds: Mapping[str, FaultKindSpec] | None = None) -> Scenario:
    """One scenario document (no `extends:`: that needs a file to resolve from)."""
    root = _compose(text, filename)
    if isinstance(root, yaml.MappingNode) and _mapping_get(root, "extends") is not None:
        raise SpecError([f"{_where(_mapping_get(root, 'extends'))}: extends: only a scenario file can extend another"])
    return _validate(root, filename, fault_kinds)


def _validate(root: yaml.Node | None, filename: str, fault_kinds: Mapping[str, FaultKindSpec] | None) -> Scenario:
    if not isinstance(root, yaml.MappingNode):
        raise SpecError([f"{_where(root, filename)}: a scenario is a mapping with at least `name:`"])
    data = yaml.SafeLoader("").construct_document(root)
    _absolute_patches(root, data)

    def where(node: yaml.Node | None) -> str:
        return _where(node, filename)

    try:
        s = Scenario.model_validate(data)
    except ValidationError as ve:
        lines = []
        for e in ve.errors():
            loc = tuple(e["loc"])
            if e["type"] == "extra_forbidden":
                allowed = _allowed_keys(_model_at(loc))
                lines.append(f"{where(_key_node(root, loc))}: {_dotted(loc)}: unknown key"
                             + (f"; allowed: {allowed}" if allowed else ""))
            else:
                lines.append(f"{where(_node_at(root, loc))}: {_dotted(loc)}: {_pydantic_message(e)}")
        raise SpecError(lines) from None
    errs = semantic_errors(s, fault_kinds)
    if errs:
        raise SpecError([f"{where(_key_node(root, loc))}: {_dotted(loc)}: {msg}" for loc, msg in errs])
    return s


def _absolute_patches(root: yaml.MappingNode, data: dict[str, Any]) -> None:
    """cluster.patches as absolute paths, each relative one taken from the directory of the file that
    names it (a base's patch from the base's; a document without a file: the working directory)."""
    cluster = data.get("cluster")
    node = _node_at(root, ("cluster", "patches"))
    if not (isinstance(cluster, dict) and isinstance(cluster.get("patches"), list) and isinstance(node, yaml.SequenceNode)):
        return
    for i, (item, value) in enumerate(zip(node.value, cluster["patches"])):
        if isinstance(value, str) and value and not Path(value).is_absolute():
            src = Path(item.start_mark.name)
            cluster["patches"][i] = os.path.abspath((src.parent if src.is_file() else Path.cwd()) / value)


def dump_scenario(s: Scenario) -> str:
    return yaml.safe_dump(s.resolved(), sort_keys=False)
