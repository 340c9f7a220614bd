-- Arrivals per user per minute of processing time: examples/guides/processing-time.toml as SQL.
SET 'name' = 'arrivals-per-minute';

CREATE TABLE arrivals (
  user_id STRING,
  page STRING,
  arrived AS PROCTIME()
) WITH ('format' = 'json');

SELECT window_start, window_end, user_id, COUNT(*) AS records
FROM TABLE(TUMBLE(TABLE arrivals, DESCRIPTOR(arrived), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, user_id;
