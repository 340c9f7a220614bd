-- Per-user sessions that end after 20 seconds without a click: their clicks and spend.
SET 'name' = 'sessions';

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

SELECT window_start, window_end, user_id, COUNT(*) AS clicks, SUM(price) AS spent
FROM TABLE(SESSION(TABLE clicks PARTITION BY user_id, DESCRIPTOR(event_time), INTERVAL '20' SECOND))
GROUP BY window_start, window_end, user_id;
