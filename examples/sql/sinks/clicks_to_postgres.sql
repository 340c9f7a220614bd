-- examples/sql/clicks_per_minute.sql into a PostgreSQL table, as Flink's JDBC connector is
-- written: `tidemark run --sql` commits the panes to the topic exactly once, and `tidemark sink
-- postgres --sql` on the same file carries them into the table exactly once. The password is
-- best left out of the file: TIDEMARK__SINK__POSTGRES__URL overrides the whole connection.
SET 'name' = 'clicks-per-minute';

CREATE TABLE clicks (
  user_id STRING,
  page STRING,
  price DOUBLE,
  ts BIGINT,
  event_time AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'clicks',
  'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json'
);

CREATE TABLE clicks_per_minute WITH (
  'connector' = 'jdbc',
  'url' = 'jdbc:postgresql://127.0.0.1:5432/results',
  'username' = 'tidemark',
  'table-name' = 'clicks_per_minute',
  'dead-letter-table' = 'clicks_dead_letters',
  'sink.buffer-flush.interval' = '1s',
  'topic' = 'clicks-per-minute'
);

INSERT INTO clicks_per_minute
SELECT window_start, window_end, user_id,
       COUNT(*) AS clicks, SUM(price) AS revenue, MAX(price) AS max_price
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))
WHERE page <> '/health'
GROUP BY window_start, window_end, user_id;
