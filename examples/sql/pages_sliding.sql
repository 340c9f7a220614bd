-- Per page, a 2-minute sliding window moved every 30 seconds: clicks, distinct users, and
-- the mean and spread of prices (NULL prices skipped, as SQL's aggregates skip them).
SET 'name' = 'pages-sliding';

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

SELECT window_start, window_end, page,
       COUNT(*) AS clicks, COUNT(price) AS priced, COUNT(DISTINCT user_id) AS users,
       AVG(price) AS mean_price, MIN(price) AS min_price, STDDEV_POP(price) AS price_spread
FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '30' SECOND, INTERVAL '2' MINUTE))
GROUP BY window_start, window_end, page;
