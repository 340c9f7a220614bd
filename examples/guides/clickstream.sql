-- Beam's per-page clicks with early firings: examples/guides/clickstream.toml as SQL.
SET 'name' = 'clicks-per-page';

CREATE TABLE clicks (
  page STRING,
  price DOUBLE,
  quantity INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '10' SECOND
) WITH ('format' = 'json');

SELECT window_start, window_end, page, COUNT(*) AS events, SUM(price * quantity) AS revenue
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, page
EMIT EARLY EVERY INTERVAL '10' SECOND, LATE EVERY ROW, ALLOWED LATENESS INTERVAL '5' MINUTE, ACCUMULATING;
