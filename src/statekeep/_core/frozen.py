"""Deep-frozen JSON values: what :attr:`State.data` hands out, so in-place edits fail loudly.

A frozen dict or list is a real ``dict`` or ``list`` (it compares, serialises and passes
``isinstance`` like one) whose methods that would change it raise TypeError. Copies made
with :func:`copy.copy`, :func:`copy.deepcopy` or pickle are plain and changeable.
"""

from __future__ import annotations

from typing import Any, NoReturn

READ_ONLY = (
    "State.data is read-only: change it with state.set_data(key, value) or state.delete_data(key), "
    "which the history records; copy.deepcopy(state.data) gives a copy you can edit"
)


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(READ_ONLY)


class FrozenDict(dict[str, Any]):
    """A dict that refuses changes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, object]) -> dict[str, Any]:
        return {key: thaw(item) for key, item in self.items()}

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        return (dict, (self.__deepcopy__({}),))


class FrozenList(list[Any]):
    """A list that refuses changes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, object]) -> list[Any]:
        return [thaw(item) for item in self]

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[Any]]]:
        return (list, (self.__deepcopy__({}),))


def freeze(value: Any) -> Any:
    """A deep-frozen copy of a JSON value (dicts and lists; other values are immutable)."""
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList([freeze(item) for item in value])
    return value


def thaw(value: Any) -> Any:
    """A plain, changeable deep copy of a (frozen) JSON value."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value
