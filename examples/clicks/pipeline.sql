-- Clicks and revenue per user per minute: examples/clicks/pipeline.toml as SQL. tidemark reads
-- `ts` as epoch milliseconds or an RFC 3339 string.
SET 'name' = 'clicks-per-minute';

CREATE TABLE clicks (
  user_id STRING,
  page STRING,
  price DOUBLE,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('format' = 'json', 'scan.watermark.idle-timeout' = '30 s');

SELECT window_start, window_end, user_id,
       COUNT(*) AS clicks, SUM(price) AS revenue, MAX(price) AS max_price
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, user_id
EMIT EARLY EVERY INTERVAL '10' SECOND, LATE EVERY ROW, ALLOWED LATENESS INTERVAL '2' MINUTE, ACCUMULATING;
