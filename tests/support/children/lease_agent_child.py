"""An agent process run under a lease, for tests/leases/test_agent_lease.py to pause (SIGSTOP).

Run as ``python lease_agent_child.py URL OPTIONS_JSON STATE_ID TTL``: an Agent with
``lease_ttl=TTL`` (owner ``child``) runs State STATE_ID in the store ``open_store(URL,
**OPTIONS)``. Its model prints :data:`MARKER` and waits for a line on stdin, then answers.
The process prints ``stale: <message>`` and exits with :data:`STALE` if the run ends with
StaleLeaseError; ``finished`` and exit 0 if it finishes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from statekeep import Agent, Reply, StaleLeaseError, State, open_store

MARKER = "lease-child: asking the model"
STALE = 3


def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
    print(MARKER, flush=True)
    sys.stdin.readline()
    return Reply("the child's answer")


def main(url: str, options: str, state_id: str, ttl: str) -> int:
    store = open_store(url, **json.loads(options))
    agent = Agent(model, store=store, lease_ttl=float(ttl), owner="child")
    try:
        agent.run(State("a leased task", id=state_id))
    except StaleLeaseError as exc:
        print(f"stale: {exc}", flush=True)
        return STALE
    finally:
        store.close()
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
