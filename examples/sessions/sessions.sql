-- Per-user sessions that end after 30 minutes without an event: examples/sessions/sessions.toml
-- as SQL.
SET 'name' = 'user-sessions';
-- SQL sessions merge when their events lie exactly one gap apart (Flink's rule); the TOML file
-- keeps Beam's, and so does this twin.
SET 'window.merge_touching' = 'false';

CREATE TABLE events (
  user_id STRING,
  kind STRING,
  page STRING,
  price DOUBLE,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' MINUTE
) WITH ('format' = 'json');

SELECT window_start, window_end, user_id,
       COUNT(*) AS events, DURATION() AS duration_ms, COUNT(DISTINCT page) AS distinct_pages,
       FIRST_VALUE(page) AS entry_page, LAST_VALUE(page) AS exit_page, SUM(price) AS spend,
       TOP_K(page, 2) AS top_pages
FROM TABLE(SESSION(TABLE events PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '30' MINUTE))
GROUP BY window_start, window_end, user_id
EMIT EARLY EVERY INTERVAL '1' MINUTE, LATE EVERY ROW, ALLOWED LATENESS INTERVAL '2' HOUR, ACCUMULATING;
