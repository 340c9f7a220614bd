-- Running counters per shop, never closed: examples/dataflow/counters.toml as SQL. A plain GROUP
-- BY is one window per key that never closes; EMIT says when it fires.
SET 'name' = 'orders-per-shop';
SET 'window.idle_expiry' = '1d';

CREATE TABLE orders (
  shop STRING,
  amount DOUBLE,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts
) WITH ('format' = 'json');

SELECT shop, COUNT(*) AS orders, SUM(amount) AS revenue
FROM orders
GROUP BY shop
EMIT EARLY EVERY 100 ROWS, EARLY EVERY INTERVAL '10' SECOND, ACCUMULATING;
