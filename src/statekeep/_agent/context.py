"""What a tool learns about its call: :class:`ToolContext`, and :data:`NotRun` (defined in
:mod:`statekeep._core.context`, below the stores, which give one to a durable step's
``reconcile``)."""

from __future__ import annotations

from .._core.context import NotRun, ToolContext, _NotRunType

__all__ = ["NotRun", "ToolContext", "_NotRunType"]
