-- All clicks per 30 seconds, no key: one row per window.
SET 'name' = 'all-clicks';

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

SELECT window_start, window_end, COUNT(*) AS clicks, MAX(price) AS top_price
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '30' SECOND))
WHERE price > 0
GROUP BY window_start, window_end;
