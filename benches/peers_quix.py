"""The peers benchmark's Quix Streams application (run by benches/peers.py inside its own venv).

The same job as tidemark's side of the benchmark: per `user_id` (the message key), tumbling 1 s
windows over the event time in the JSON field `ts`, with a count (`clicks`) and a sum of `price` (`revenue`), emitted once
when the window closes, exactly-once with 100 ms commits. Windows close by partition (Quix's
`closing_strategy="partition"`), which is the closest match to tidemark's watermark: a window
fires once the partition has seen a later event time.

Arguments: BROKER INPUT_TOPIC OUTPUT_TOPIC GROUP STATE_DIR
"""

import sys

from quixstreams import Application
from quixstreams.dataframe.windows import Count, Sum


def event_time(value, headers, timestamp, timestamp_type):
    return int(value["ts"])


def main():
    broker, input_topic, output_topic, group, state_dir = sys.argv[1:6]
    app = Application(
        broker_address=broker,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=0.1,
        state_dir=state_dir,
        # The test broker needs short group timeouts (see the notes on Tansu in ARCHITECTURE.md).
        consumer_extra_config={"session.timeout.ms": 6000, "max.poll.interval.ms": 30000},
        loglevel="WARNING",
    )
    source = app.topic(input_topic, value_deserializer="json", timestamp_extractor=event_time)
    sink = app.topic(output_topic, value_serializer="json")
    sdf = app.dataframe(source)
    sdf = sdf.tumbling_window(duration_ms=1000).agg(clicks=Count(), revenue=Sum("price"))
    sdf = sdf.final(closing_strategy="partition")
    sdf = sdf.apply(
        lambda value, key, timestamp, headers: {
            "key": key.decode() if isinstance(key, bytes) else key,
            "window_start": value["start"],
            "window_end": value["end"],
            "clicks": value["clicks"],
            "revenue": value["revenue"],
        },
        metadata=True,
    )
    sdf.to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
