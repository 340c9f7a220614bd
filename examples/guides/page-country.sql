-- Clicks per page and country, without bots: examples/guides/page-country.toml as SQL.
SET 'name' = 'clicks-per-page-and-country';

CREATE TABLE events (
  kind STRING,
  page STRING,
  geo ROW<country STRING>,
  user_agent STRING,
  price DOUBLE,
  quantity INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '10' SECOND
) WITH ('format' = 'json');

SELECT window_start, window_end, page, lower(geo.country) AS country,
       COUNT(*) AS clicks, SUM(price * quantity) AS spend
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
WHERE kind = 'click' AND user_agent NOT LIKE '%bot%'
GROUP BY window_start, window_end, page, lower(geo.country)
EMIT ALLOWED LATENESS INTERVAL '5' MINUTE;
