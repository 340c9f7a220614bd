-- Clicks and revenue per user per minute, from a clickstream: the query of
-- examples/clicks/pipeline.toml in SQL, as Flink writes it.
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
  'connector' = 'kafka',
  'topic' = 'clicks-per-minute'
);

INSERT INTO clicks_per_minute
SELECT window_start, window_end, user_id,
       COUNT(*) AS clicks, SUM(price) AS revenue, MAX(price) AS max_price
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))
WHERE page <> '/health'
GROUP BY window_start, window_end, user_id;
