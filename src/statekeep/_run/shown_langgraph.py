"""A LangGraph thread's history entry in words, its values decoded (pure: imports no LangGraph).

The adapter keeps each value as LangGraph's serializer made it, ``[type, base64]`` (see
:mod:`._langgraph_history`). Shown here: ``null``, ``json`` and ``msgpack`` values decoded
(msgpack with ``ormsgpack``, which langgraph-checkpoint installs), the objects LangGraph
encodes as msgpack extensions as ``{"object": "module.Name", ...their fields}``, built from the
stored fields only: nothing is imported or constructed. What cannot be decoded here (pickle,
an encrypted serializer's bytes, msgpack without ``ormsgpack``) shows as its type and size.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from .shown import Shown

#: LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus)
_CONSTRUCTED = range(0, 6)  # constructor/method/pydantic: [module, name, args, ...]
_NUMPY, _DELTA = 6, 7


def shown(entry: dict[str, Any]) -> Shown:
    kind = entry.get("kind")
    if kind == "lg.checkpoint":
        meta = decoded(entry.get("metadata"))
        values, said = _values(entry)
        step = meta.get("step") if isinstance(meta, Mapping) else None
        source = meta.get("source") if isinstance(meta, Mapping) else None
        where = f" in {entry.get('ns')!r}" if entry.get("ns") else ""
        line = f"checkpoint {entry.get('id')}{where} (step {step}, {source}): {said}"
        return Shown(entry, line, {"values": values, "metadata": meta})
    if kind == "lg.values":
        values, said = _values(entry)
        return Shown(entry, f"values a kept checkpoint refers to: {said}", {"values": values})
    if kind == "lg.moved":
        return Shown(entry, f"moved to State {entry.get('to')} (rewritten by prune or delete_for_runs)")
    if kind == "lg.writes":
        writes = [w for w in entry.get("writes") or [] if isinstance(w, list) and len(w) == 3]
        detail = {str(channel): decoded(blob) for _, channel, blob in writes}
        said = ", ".join(f"{channel}={brief(value)}" for channel, value in detail.items())
        line = f"writes of task {entry.get('task')} for checkpoint {entry.get('checkpoint')}: {said}"
        return Shown(entry, line, detail)
    if kind == "lg.drop":
        dropped = entry.get("drop") or []
        return Shown(entry, f"dropped {len(dropped)} checkpoint(s) (delete_for_runs)", dropped)
    if kind == "lg.prune":
        kept = entry.get("keep") or []
        return Shown(entry, f"pruned: kept {len(kept)} newest checkpoint(s), hid the others", kept)
    if kind == "lg.tip":
        return Shown(entry, "end of a write (the next one checks it)")
    return Shown(entry)


def _values(entry: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A checkpoint's values as stored (format 2: some refer to earlier entries, a growing
    list holds what it appends), decoded, and in a few words."""
    values: dict[str, Any] = {
        channel: decoded(blob) for channel, blob in _mapping(entry.get("values")).items()
    }
    words = [f"{channel}={brief(value)}" for channel, value in values.items()]
    for channel, delta in _mapping(entry.get("deltas")).items():
        if isinstance(delta, list) and len(delta) == 2:
            items = decoded(delta[1])
            values[channel] = {"extends seq": delta[0], "appends": items}
            words.append(f"{channel}=seq {delta[0]}'s + {brief(items)}")
    for channel, seq in _mapping(entry.get("refs")).items():
        values[channel] = {"as at seq": seq}
        words.append(f"{channel}=(as at seq {seq})")
    return values, ", ".join(words) or "no values"


def decoded(value: Any) -> Any:
    """A stored ``[type, base64]`` value, decoded where the serializer's format allows."""
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        return value
    kind, text = value
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return f"<{kind}: not base64>"
    if kind == "null":
        return None
    if kind == "json":
        try:
            return json.loads(data)
        except ValueError:
            pass
    elif kind == "msgpack":
        try:
            import ormsgpack
        except ImportError:  # langgraph-checkpoint installs it; the viewer may run without it
            return f"<msgpack, {len(data)} bytes: pip install 'statekeep[langgraph]' to see it decoded>"
        try:
            return ormsgpack.unpackb(data, ext_hook=_extension, option=ormsgpack.OPT_NON_STR_KEYS)
        except (ormsgpack.MsgpackDecodeError, ValueError, TypeError):
            pass
    elif kind in ("bytes", "bytearray"):
        return f"<{kind}, {len(data)} bytes>"
    return f"<{kind}, {len(data)} bytes, not decoded here>"


def brief(value: Any) -> str:
    """A decoded value in a few words: a message by its text, a list by its size and last item."""
    if isinstance(value, dict) and isinstance(value.get("object"), str) and "content" in value:
        return f"{value['object'].rsplit('.', 1)[-1]}({brief(value['content'])})"
    if isinstance(value, list) and value:
        return f"[{len(value)}: …{brief(value[-1])}]" if len(value) > 1 else f"[{brief(value[0])}]"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _extension(code: int, data: bytes) -> Any:
    """One of LangGraph's msgpack extensions as plain data (never an object built from it)."""
    import ormsgpack

    inner = ormsgpack.unpackb(data, ext_hook=_extension, option=ormsgpack.OPT_NON_STR_KEYS)
    if code in _CONSTRUCTED and isinstance(inner, list) and len(inner) >= 3:
        module, name, args = inner[0], inner[1], inner[2]
        shown: dict[str, Any] = {"object": f"{module}.{name}"}
        if isinstance(args, dict):
            shown.update({k: v for k, v in args.items() if v not in (None, {}, [], "") and k != "object"})
        else:
            shown["value"] = args
        return shown
    if code == _DELTA:
        return inner
    if code == _NUMPY:
        return "<numpy array>"
    return f"<msgpack extension {code}>"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
