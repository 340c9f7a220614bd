#!/usr/bin/env python3
"""Writes a Nexmark-shaped events file, one JSON object per line, for the SQL examples in
examples/sql/nexmark/ and their differential check against Flink (scripts/flink-sql-reference.py).

Each line is one event as Nexmark's Flink queries read it: `event_type` (0 person, 1 auction,
2 bid) and the three nested rows `person`, `auction`, `bid`, of which the one the type names is
set and the others are null. The proportions are Nexmark's (1 person, 3 auctions, 46 bids in
every 50 events); event times are epoch milliseconds (`dateTime`), 40 ms apart, and some events
arrive up to 1.5 s out of order: inside the queries' 4-second watermark delay, so that no row
depends on when a watermark was emitted. The file is deterministic for a seed.

Usage: nexmark-sample.py [EVENTS] [SEED] > events.jsonl
"""
import json
import random
import sys

CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"]
STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
FIRST = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
LAST = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]


def main(n, seed):
    rng = random.Random(seed)
    base = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC
    people, auctions = [], []
    next_person, next_auction = 1000, 1000
    events = []
    for i in range(n):
        t = base + i * 40
        if rng.random() < 0.2:
            t -= rng.randrange(1500)
        kind = i % 50
        if kind == 0 or not people:
            pid = next_person
            next_person += 1
            people.append(pid)
            person = {
                "id": pid,
                "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                "emailAddress": f"user{pid}@example.com",
                "creditCard": " ".join(f"{rng.randrange(10000):04d}" for _ in range(4)),
                "city": rng.choice(CITIES),
                "state": rng.choice(STATES),
                "dateTime": t,
                "extra": "",
            }
            events.append({"event_type": 0, "person": person, "auction": None, "bid": None})
        elif kind in (1, 2, 3) or not auctions:
            aid = next_auction
            next_auction += 1
            auctions.append(aid)
            initial = rng.randrange(1, 1000)
            auction = {
                "id": aid,
                "itemName": f"item-{aid}",
                "description": "",
                "initialBid": initial,
                "reserve": initial + rng.randrange(1, 1000),
                "dateTime": t,
                "expires": t + 20_000,
                "seller": rng.choice(people[-20:]),
                "category": 10 + rng.randrange(5),
                "extra": "",
            }
            events.append({"event_type": 1, "person": None, "auction": auction, "bid": None})
        else:
            bid = {
                "auction": rng.choice(auctions[-30:]),
                "bidder": rng.choice(people[-30:]),
                "price": rng.randrange(100, 100_000),
                "channel": rng.choice(CHANNELS),
                "url": f"https://www.nexmark.com/{rng.randrange(1000)}",
                "dateTime": t,
                "extra": "",
            }
            events.append({"event_type": 2, "person": None, "auction": None, "bid": bid})
    for e in events:
        print(json.dumps(e, separators=(",", ":")))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000, int(sys.argv[2]) if len(sys.argv) > 2 else 7)
