"""The contract of runs you can query and keep in order, one mixin per theme (issue 10)."""

from __future__ import annotations

from ._expiry import ExpiryContract
from ._lineage import LineageContract
from ._listing import ListingContract
from ._spaces import SpacesContract


class RunsContract(ListingContract, LineageContract, ExpiryContract, SpacesContract):
    """Listing queries, SavedState fields and lineage, fork, expiry and gc, namespaces and
    agent memory; mixed into :class:`StoreContract`."""
