-- Revenue per page over the past six hours, every hour, in Spark SQL's form:
-- examples/guides/rolling-revenue.toml as SQL.
SET 'name' = 'rolling-revenue';

CREATE TABLE purchases (
  user_id STRING,
  page STRING,
  price DOUBLE,
  quantity BIGINT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE
) WITH ('format' = 'json');

SELECT window.start, window.end, page, COUNT(*) AS purchases, SUM(price * quantity) AS revenue
FROM purchases
WHERE price > 0
GROUP BY window(ts, '6 hours', '1 hour'), page;
