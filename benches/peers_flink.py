"""The peers benchmark's Flink job (run by benches/peers.py with the Python of the JVM engines' venv).

The same job as tidemark's side of the benchmark, in Flink SQL: per `user_id`, tumbling 1 s
windows over the event time in the JSON field `ts`, with a count (`clicks`) and a sum of `price`
(`revenue`), emitted once when the watermark passes the window's end (the watermark is the event
time itself, as the data is in order per partition), exactly-once: a checkpoint every 100 ms
commits the Kafka sink's transaction and the source's offsets to the consumer group.

The Kafka connector is not in apache-flink's wheels; its two jars (connector and client) are
given as JARS_DIR (benches/peers.py unpacks them from a PyPI wheel that carries them). The sink
writes with one writer: on the test broker, a read_committed reader stalled behind two.

Arguments: BROKER INPUT_TOPIC OUTPUT_TOPIC GROUP JARS_DIR
"""

import os
import sys

from pyflink.table import EnvironmentSettings, TableEnvironment


def main():
    broker, input_topic, output_topic, group, jars = sys.argv[1:6]
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("pipeline.jars", ";".join(
        f"file://{os.path.join(jars, j)}" for j in ("flink-connector-kafka.jar", "kafka-clients.jar")))
    conf.set("parallelism.default", "2")
    conf.set("execution.checkpointing.interval", "100ms")
    conf.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    conf.set("table.local-time-zone", "UTC")
    env.execute_sql(f"""
        CREATE TABLE events (user_id STRING, ts BIGINT, price DOUBLE,
          rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt)
        WITH ('connector' = 'kafka', 'topic' = '{input_topic}',
              'properties.bootstrap.servers' = '{broker}', 'properties.group.id' = '{group}',
              'properties.isolation.level' = 'read_committed',
              'scan.startup.mode' = 'earliest-offset', 'format' = 'json')""")
    env.execute_sql(f"""
        CREATE TABLE panes (`key` STRING, window_start BIGINT, clicks BIGINT, revenue DOUBLE)
        WITH ('connector' = 'kafka', 'topic' = '{output_topic}',
              'properties.bootstrap.servers' = '{broker}',
              'properties.transaction.timeout.ms' = '60000',
              'sink.delivery-guarantee' = 'exactly-once',
              'sink.transactional-id-prefix' = '{group}', 'sink.parallelism' = '1',
              'format' = 'json')""")
    env.execute_sql("""
        INSERT INTO panes
        SELECT user_id, UNIX_TIMESTAMP(DATE_FORMAT(window_start, 'yyyy-MM-dd HH:mm:ss')) * 1000,
               COUNT(*), SUM(price)
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' SECOND))
        GROUP BY window_start, window_end, user_id""").wait()


if __name__ == "__main__":
    main()
