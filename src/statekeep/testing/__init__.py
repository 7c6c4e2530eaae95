"""statekeep.testing: the Store conformance kit, for the authors of stores.

Every built-in store passes it; yours can too. Install the kit's test tools with
``pip install 'statekeep[testing]'`` (pytest, pytest-asyncio and Hypothesis), then in a
``test_*.py`` file subclass :class:`StoreContract` as a ``Test...`` class and say how to make
your store::

    from statekeep.testing import StoreContract

    class TestMyStore(StoreContract):
        supports_delete = False  # capability flags: what your store cannot offer

        def make_store(self, tmp_path):
            return MyStore(tmp_path / "store")

Your class inherits every contract test, each run through the sync and the async API, plus a
model-based test (:class:`StoreMachine`, needs Hypothesis). The async tests are marked
``pytest.mark.asyncio`` themselves, so they run wherever pytest-asyncio is installed, in its
strict mode too: no ``asyncio_mode`` setting is needed. Where trio is installed, each async test
also has a twin, ``<name>_under_trio``, that runs the same body under trio: the async API must
work awaited from trio too. The twin is marked ``pytest.mark.anyio`` and the class's
``anyio_backend`` fixture is ``"trio"``, so in pytest-asyncio's strict mode anyio's pytest plugin
(installed with anyio) runs it on trio; in auto mode pytest-asyncio takes it (it takes every
coroutine test) and the twin runs its body under trio itself, in a worker thread
(``anyio.run(..., backend="trio")``). Either way the same tests run on trio, and
``test_async_tests_run_on_the_backend_they_name`` checks it. Your ``server_now`` and
``plant_snapshot`` run on asyncio even then.

``make_store(tmp_path)`` gets an empty folder that is yours for the test; for a durable store,
called again with the same folder it must open the same storage (the tests re-open it as
another process would). The flags, all True unless you say otherwise:

- ``supports_list``, ``supports_delete``: the store has ``list()`` / ``delete()``;
- ``durable``: a new store on the same storage sees everything (False for an in-memory store);
- ``checks_data``: bad ids, entries and snapshots are refused before anything is written, as the
  built-in stores refuse them (subclassing :class:`~statekeep.Store` does not do this for you);
- ``refuses_closed``: a closed store raises RuntimeError;
- ``settles_cancelled``: a cancelled ``awrite``, ``asave`` or ``adelete`` raises only once it happened
  whole or never started (tested through the async API only). Subclassing :class:`~statekeep.Store`
  gives this for a store written with sync methods; with async ones, do not let cancellation cut a
  write short.
- ``supports_trio``: the store's async methods work awaited from trio (subclassing
  :class:`~statekeep.Store` with sync methods gives this; async methods of your own written on
  asyncio-only drivers do not: set it False, and the trio twins are skipped, saying so);
- ``supports_query``: ``list()`` takes the filters and pages of :meth:`statekeep.Store.list`
  (``limit``, ``after``, ``agent``, ``parent``, ``labels``, ...) and returns a list with ``.next``;
  lineage (``list(parent=)``, ``delete(children=True)``) needs it too;
- ``supports_expiry``: a snapshot's ``expires_at`` expires its State (absent for read, load, list,
  fork and write), the store takes ``retention=`` and has ``gc()``;
- ``supports_namespaces``: the store takes ``namespace=``; ``supports_memory``: it has
  ``memory(scope)``;
- ``supports_expect_next``: its ``write``/``awrite`` take ``expect_next=N`` and refuse the write
  (``StateConflictError``, nothing written) unless the State's next seq is N, atomically with it.
  None by default: whether its write takes the keyword (its tests are skipped, saying so, if not).
- ``supports_trim``: ``trim(id, before=seq)`` / ``atrim`` (a compacted State's first entries
  replaced by a base record). None by default: what ``statekeep.capabilities(store)`` says (the
  group "trim", a backend's ``_trim`` hook); a store without it has those tests skipped.

A test that meets a store lacking what a flag says it has (a method that raises
NotImplementedError, a keyword it does not take) fails naming the flag to set.

The lifecycle tests open stores with options through ``make_store_with(tmp_path, **options)``
(``namespace``, ``retention``, and ``clock`` for a store that judges expiry by a clock you pass: the
tests move a :class:`FakeClock`). A store whose server judges expiry sets ``server_clock = True`` and
defines ``async server_now(store)``; its States get short expiries that the tests wait out by asking
the server for its time.

A store that offers the capability group ``blobs`` (large values stored once: ``_get_blobs``,
``_gc_blobs``, ``_blob_usage``, see :mod:`statekeep._store.engine`) runs the blob tests too
(offload at and above the default 32 KiB bound, dedup, range reads and load across references,
gc beside a writer thread, sealed blobs named per namespace); a store without it skips them,
saying so.

``statekeep_messages = True`` also holds your error messages to statekeep's wording; by default
only the exception types are checked. Importing this package needs pytest; ``import statekeep``
never imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.publish import publish
from ._contract import StoreContract
from ._expiry import FakeClock
from ._helpers import Api, entries, snapshot

if TYPE_CHECKING:  # loaded on first use by __getattr__ below: it needs Hypothesis
    from ._model import StoreMachine

__all__ = ["Api", "FakeClock", "StoreContract", "StoreMachine", "entries", "snapshot"]
publish(__name__, globals(), __all__)


def __getattr__(name: str) -> object:
    if name == "StoreMachine":
        from ._model import StoreMachine

        publish(__name__, {name: StoreMachine}, [name])
        return StoreMachine
    raise AttributeError(f"module 'statekeep.testing' has no attribute {name!r}")
