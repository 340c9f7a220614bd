-- Page views per user session in Spark SQL's form: examples/guides/page-view-sessions.toml as
-- SQL.
SET 'name' = 'page-view-sessions';

CREATE TABLE views (
  user_id STRING,
  page STRING,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE
) WITH ('format' = 'json');

SELECT session_window.start, session_window.end, user_id,
       COUNT(*) AS views, COUNT(DISTINCT page) AS pages, DURATION() AS length_ms
FROM views
GROUP BY session_window(ts, '30 minutes'), user_id;
