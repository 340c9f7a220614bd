-- A keyless sliding max, mean and min of prices: examples/guides/global-sliding.toml as SQL.
SET 'name' = 'price-window';

CREATE TABLE prices (
  price DOUBLE,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '10' SECOND
) WITH ('format' = 'json');

SELECT window_start, window_end,
       MAX(price) AS max_price, AVG(price) AS mean_price, MIN(price) AS min_price
FROM TABLE(HOP(TABLE prices, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '30' SECOND))
GROUP BY window_start, window_end;
