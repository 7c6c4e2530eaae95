"""A writer process for the Redis Cluster failover test: appends ``--writes`` entries, one
write each, to each of its States (one per namespace given), and notes each acknowledged
write in its ledger (``<sid> <seq>`` a line) only once the store returned. A write that
raises is sent again (same entries: the store skips what it already has). Prints a JSON line:
acknowledged writes and errors met."""

from __future__ import annotations

import argparse
import json
import os

from statekeep.stores import RedisStore


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--writes", type=int, required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--wait-replicas", type=int, default=1)
    parser.add_argument("namespaces", nargs="+")
    args = parser.parse_args()
    stores = [
        RedisStore(
            args.url,
            prefix=args.prefix,
            namespace=ns,
            wait_replicas=args.wait_replicas,
            wait_timeout=2,
            failover_timeout=120,  # a loaded CI machine may take long over the election
        )
        for ns in args.namespaces
    ]
    errors = acked = 0
    with open(args.ledger, "a") as ledger:
        for i in range(args.writes):
            for ns, store in zip(args.namespaces, stores, strict=True):
                sid = f"{args.name}"
                entry = {"seq": i, "kind": "note", "worker": args.name, "i": i}
                snap = {"task": "t", "created_at": "2026-01-01T00:00:00+00:00",
                        "updated_at": "2026-01-01T00:00:00+00:00", "turn": i, "stopped_by": None,
                        "finished": False}  # fmt: skip
                while True:
                    try:
                        store.write(sid, [entry], snap, create=i == 0)
                        break
                    except (ConnectionError, OSError) as exc:
                        errors += 1
                        if errors > 200:
                            raise RuntimeError(f"too many errors, the last: {exc}") from exc
                ledger.write(f"{ns} {sid} {i}\n")
                ledger.flush()
                acked += 1
        os.fsync(ledger.fileno())
    for store in stores:
        store.close()
    print(json.dumps({"acked": acked, "errors": errors}))


if __name__ == "__main__":
    main()
