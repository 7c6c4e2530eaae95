"""The storage engine interface, for a backend of your own (one package, one class).

Subclass :class:`Backend` and implement its required hooks, coroutines run on statekeep's
owner loop: ``_storage_key()``, ``_write(write)`` (a :class:`PreparedWrite`, the State's
lock held), ``_read(state_id, since)``, ``_list()`` and ``_delete(state_id, lease)``; the
constructor calls ``self._lifecycle(namespace, retention, clock)`` and
``self._protect(redact, encrypt, allow_plaintext)``. Every public method of the built-in
stores then works on it: ids and data validated and encoded before your hooks see them,
locks, closing, expiry, redaction and sealing, save/load/fork, agent memory's repair.

Your ``_write`` keeps the write rules with the helpers here: :func:`exists_error` and
:func:`missing_error` for ``create``, :func:`check_preconditions` (incarnation,
``expect_next``, sealed), :func:`plan_append` and :func:`check_overlap` (a batch sent again
is skipped, a different entry at a taken seq refused), :func:`check_fence` for leases.

A backend offers more by defining the methods of a capability group (see
:func:`capabilities`): :class:`Namespaces` (agent memory, the adapters' namespaces),
:class:`Leases`, :class:`Reseal` (``rekey``), :class:`IdWalk` (``copy --all``),
:class:`SizeOnDisk` (``stats``), :class:`ChangeStamps` (the viewer's feed), :class:`Blobs`
(large values stored once: ``_get_blobs``, ``_gc_blobs``, ``_blob_usage``, and the blobs of a
:class:`PreparedWrite` stored with it; its constructor passes ``offload=`` to
``self._take_offload``). Where it does not, each feature falls back or says so (without
:class:`Blobs`, values stay inline).
"""

from .._core.leases import Lease, check_fence
from .._core.publish import publish
from .._core.records import Record, SavedState, left_out, listing_order
from .._core.writes import PreparedWrite, check_overlap, exists_error, missing_error, plan_append
from .._store.backend import Backend
from .._store.capabilities import (
    Blobs,
    ChangeStamps,
    IdWalk,
    Leases,
    Namespaces,
    Reseal,
    SizeOnDisk,
    SnapshotReads,
    capabilities,
)
from .._store.expect import check_preconditions, sealed_text

__all__ = [
    "Backend", "Blobs", "ChangeStamps", "IdWalk", "Lease", "Leases", "Namespaces", "PreparedWrite", "Record", "Reseal",
    "SavedState", "SizeOnDisk", "SnapshotReads", "capabilities", "check_fence", "check_overlap",
    "check_preconditions", "exists_error", "left_out", "listing_order", "missing_error", "plan_append", "sealed_text",
]  # fmt: skip

# Record, SavedState and Lease report ``statekeep`` (exported there too); the rest this module.
publish(__name__, globals(), sorted(set(__all__) - {"Lease", "Record", "SavedState"}))
