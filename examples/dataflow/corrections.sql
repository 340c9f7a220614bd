-- Revenue per shop per 5 minutes, corrected by late data in discarding panes:
-- examples/dataflow/corrections.toml as SQL.
SET 'name' = 'revenue-per-5m';

CREATE TABLE orders (
  shop STRING,
  amount DOUBLE,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts
) WITH ('format' = 'json');

SELECT window_start, window_end, shop, COUNT(*) AS orders, SUM(amount) AS revenue
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' MINUTE))
GROUP BY window_start, window_end, shop
EMIT LATE EVERY 10 ROWS, ALLOWED LATENESS INTERVAL '1' HOUR, DISCARDING;
