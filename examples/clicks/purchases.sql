-- Every purchase as a row, with its price in euros: examples/clicks/purchases.toml as SQL.
-- A query without GROUP BY or aggregates writes one row per record, as Flink's does.
SET 'name' = 'purchases';

CREATE TABLE clicks (
  user_id STRING,
  page STRING,
  price DOUBLE,
  ts BIGINT,
  event_time AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
) WITH ('format' = 'json');

SELECT user_id, page, round(price * 0.908, 2) AS euros, event_time AS `at`
FROM clicks
WHERE price > 0;
