-- Revenue per user so far in each 2-minute period, updated every 30 seconds (Flink's CUMULATE).
SET 'name' = 'revenue-so-far';

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

SELECT window_start, window_end, user_id, COUNT(*) AS clicks, SUM(price) AS revenue
FROM TABLE(CUMULATE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '30' SECOND, INTERVAL '2' MINUTE))
GROUP BY window_start, window_end, user_id;
